"""The protocol on the real files: window counts, borders, train-only scaler, feature modes, timeF."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from damcha_ts.data import DataWarning, frame_info, prepare_series, split_borders

# docs/protocol.md §1.3, computed window counts (train, val, test) at L = 96.
PROTOCOL_WINDOWS = {
    "ETTh": {96: (8449, 2785, 2785), 192: (8353, 2689, 2689), 336: (8209, 2545, 2545), 720: (7825, 2161, 2161)},
    "ETTm": {96: (34369, 11425, 11425), 192: (34273, 11329, 11329), 336: (34129, 11185, 11185), 720: (33745, 10801, 10801)},
    "Weather": {96: (36696, 5175, 10444), 192: (36600, 5079, 10348), 336: (36456, 4935, 10204), 720: (36072, 4551, 9820)},
}
TABLE_ROW = {"ETTh1": "ETTh", "ETTh2": "ETTh", "ETTm1": "ETTm", "ETTm2": "ETTm", "Weather": "Weather"}


@pytest.mark.parametrize("name", list(TABLE_ROW))
def test_window_counts_equal_protocol_table(name, benchmark_frame):
    frame = benchmark_frame(name)
    for pred_len, expected in PROTOCOL_WINDOWS[TABLE_ROW[name]].items():
        data = prepare_series(frame, seq_len=96, pred_len=pred_len)
        assert tuple(data.window_count(s) for s in ("train", "val", "test")) == expected, (name, pred_len)
        assert data.dataset == name and data.marks.shape[1] == 4


def test_borders_equal_protocol_values(benchmark_frame):
    # protocol.md §1.2: ETTh borders at L=96, ETTm x4, Weather [0, 36791, 42061] / [36887, 42157, 52696].
    assert prepare_series(benchmark_frame("ETTh1")).borders == {"train": (0, 8640), "val": (8544, 11520), "test": (11424, 14400)}
    assert prepare_series(benchmark_frame("ETTm1")).borders == {"train": (0, 34560), "val": (34464, 46080), "test": (45984, 57600)}
    assert prepare_series(benchmark_frame("Weather")).borders == {"train": (0, 36887), "val": (36791, 42157), "test": (42061, 52696)}
    # Traffic and ECL use the same custom rule on their row counts (files not shipped here).
    assert split_borders("custom", 17544, 96) == {"train": (0, 12280), "val": (12184, 14036), "test": (13940, 17544)}
    assert split_borders("custom", 26304, 96) == {"train": (0, 18412), "val": (18316, 21044), "test": (20948, 26304)}


def test_ett_uses_first_twenty_months_only(benchmark_frame):
    data = prepare_series(benchmark_frame("ETTh1"))
    assert data.total_rows == 17420 and len(data.timestamps) == data.values.shape[0] == 14400
    assert data.timestamps[-1] == pd.Timestamp("2018-02-20 23:00:00")


def test_benchmark_by_name_reads_and_verifies_the_file():
    data = prepare_series("ETTh1", pred_len=192)
    assert data.dataset == "ETTh1" and data.window_count("test") == 2689 and data.source.endswith("ETTh1.csv.gz")


def test_scaler_is_fit_on_train_rows_only(benchmark_frame, data_root):
    frame = benchmark_frame("ETTh1")
    data = prepare_series(frame)
    # Independent reference: plain pandas, first 8640 rows, population std.
    raw = pd.read_csv(data_root / "ETTh1.csv.gz").drop(columns=["date"]).to_numpy()[:8640]
    np.testing.assert_allclose(data.scaler.mean_, raw.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(data.scaler.scale_, raw.std(axis=0, ddof=0), rtol=1e-12)

    changed = frame.copy()
    changed.iloc[8640:] = changed.iloc[8640:] * 3.0 + 100.0  # every val/test row changed
    after = prepare_series(changed)
    np.testing.assert_array_equal(after.scaler.mean_, data.scaler.mean_)
    np.testing.assert_array_equal(after.scaler.scale_, data.scaler.scale_)
    np.testing.assert_array_equal(after.scaled[:8640], data.scaled[:8640])
    assert not np.allclose(after.scaled[8640:], data.scaled[8640:])

    train_changed = frame.copy()
    train_changed.iloc[100] += 5.0  # one train row changed: the scaler must move
    assert not np.array_equal(prepare_series(train_changed).scaler.mean_, data.scaler.mean_)
    np.testing.assert_allclose(
        data.scaled, ((data.values - raw.mean(axis=0)) / raw.std(axis=0)).astype(np.float32), rtol=1e-6, atol=1e-6
    )
    np.testing.assert_allclose(data.scaler.inverse_transform(data.scaled.astype(np.float64)), data.values, atol=1e-4)


def test_feature_modes_move_target_last(benchmark_frame):
    weather = benchmark_frame("Weather")
    m = prepare_series(weather, features="M")
    ms = prepare_series(weather, features="MS")
    s = prepare_series(weather, features="S")
    assert m.columns[-1] == ms.columns[-1] == "OT" and s.columns == ["OT"]
    np.testing.assert_array_equal(s.values[:, 0], weather["OT"].to_numpy())
    np.testing.assert_array_equal(ms.scaled, m.scaled)
    # A user frame whose target is not last: S/MS (and M, like TSLib's custom loader) move it.
    reordered = weather[["OT", "p (mbar)", "T (degC)"]].copy()
    reordered.attrs.clear()
    with pytest.warns(DataWarning, match="kept because allow_irregular=True"):
        user = prepare_series(reordered, features="MS", allow_irregular=True)
    assert user.columns == ["p (mbar)", "T (degC)", "OT"]
    np.testing.assert_array_equal(user.values[:, -1], weather["OT"].to_numpy())


def test_benchmark_irregular_stamps_are_kept_with_a_warning(benchmark_frame):
    weather, caught = benchmark_frame.warnings_of("Weather")
    assert len(weather) == 52696  # protocol rows kept
    messages = [str(w.message) for w in caught if issubclass(w.category, DataWarning)]
    assert any("duplicate timestamp 2020-05-12 06:00:00" in m and "2020-05-29 11:10:00" in m for m in messages)
    assert frame_info(weather)["freq"] == "10min"


def _hand_timef(stamp: pd.Timestamp) -> list[float]:
    # protocol.md §1.4: HourOfDay h/23-.5, DayOfWeek dow/6-.5, DayOfMonth (d-1)/30-.5, DayOfYear (doy-1)/365-.5
    return [stamp.hour / 23 - 0.5, stamp.dayofweek / 6 - 0.5, (stamp.day - 1) / 30 - 0.5, (stamp.dayofyear - 1) / 365 - 0.5]


def test_time_features_at_known_timestamps(benchmark_frame):
    data = prepare_series(benchmark_frame("ETTh1"))
    # 2016-07-01 00:00 was a Friday (dow 4), day 183 of a leap year.
    np.testing.assert_allclose(data.marks[0], [-0.5, 4 / 6 - 0.5, -0.5, 182 / 365 - 0.5], atol=1e-7)
    np.testing.assert_allclose(data.marks[13], [13 / 23 - 0.5, 4 / 6 - 0.5, -0.5, 182 / 365 - 0.5], atol=1e-7)
    for row in (0, 4321, 14399):
        np.testing.assert_allclose(data.marks[row], _hand_timef(data.timestamps[row]), atol=1e-7)

    # Edge days: 2016-12-31 23:00 (Saturday, day 366 of a leap year), 2018-01-01 00:00 (Monday).
    stamps = pd.DatetimeIndex(["2016-12-31 21:00", "2016-12-31 22:00", "2016-12-31 23:00"], name="date")
    user = prepare_series(pd.DataFrame({"OT": [1.0, 2.0, 3.0]}, index=stamps), seq_len=1, pred_len=1, split={"train": (0, 3), "val": (0, 3), "test": (0, 3)})
    np.testing.assert_allclose(user.marks[2], [0.5, 5 / 6 - 0.5, 0.5, 0.5], atol=1e-7)
    stamps = pd.date_range("2018-01-01 00:00", periods=3, freq="h")
    user = prepare_series(pd.DataFrame({"OT": [1.0, 2.0, 3.0]}, index=stamps), seq_len=1, pred_len=1, split={"train": (0, 3), "val": (0, 3), "test": (0, 3)})
    np.testing.assert_allclose(user.marks[0], [-0.5, -0.5, -0.5, -0.5], atol=1e-7)


def test_true_frequency_time_features(benchmark_frame):
    data = prepare_series(benchmark_frame("Weather"), time_features_freq=None)
    assert data.mark_names == ["minute_of_hour", "hour_of_day", "day_of_week", "day_of_month", "day_of_year"]
    # 2020-01-01 00:10 was a Wednesday (dow 2).
    np.testing.assert_allclose(data.marks[0], [10 / 59 - 0.5, -0.5, 2 / 6 - 0.5, -0.5, -0.5], atol=1e-7)
    daily = prepare_series(np.arange(60.0), freq="D", start="2020-03-01", seq_len=4, pred_len=2, time_features_freq=None)
    assert daily.mark_names == ["day_of_week", "day_of_month", "day_of_year"]
    np.testing.assert_allclose(daily.marks[0], [6 / 6 - 0.5, -0.5, 60 / 365 - 0.5], atol=1e-7)  # Sunday, day 61


# protocol.md §1.3 for the two files not shipped in $DAMCHA_TS_DATA.
SYNTHETIC_WINDOWS = {
    "Traffic": (17544, 862, {96: (12089, 1661, 3413), 192: (11993, 1565, 3317), 336: (11849, 1421, 3173), 720: (11465, 1037, 2789)}),
    "Electricity": (26304, 321, {96: (18221, 2537, 5165), 192: (18125, 2441, 5069), 336: (17981, 2297, 4925), 720: (17597, 1913, 4541)}),
}


@pytest.mark.parametrize("name", list(SYNTHETIC_WINDOWS))
def test_traffic_and_ecl_code_path_on_synthetic_data_of_their_shape(name):
    rows, variates, table = SYNTHETIC_WINDOWS[name]
    rng = np.random.default_rng(0)
    columns = [str(i) for i in range(variates - 1)] + ["OT"]
    frame = pd.DataFrame(
        rng.normal(size=(rows, variates)).astype(np.float32),
        index=pd.date_range("2016-07-01 02:00:00", periods=rows, freq="h"),
        columns=columns,
    )
    for pred_len, expected in table.items():
        data = prepare_series(frame, seq_len=96, pred_len=pred_len, split="custom")
        assert tuple(data.window_count(s) for s in ("train", "val", "test")) == expected
    batch = data.windows("test").batch(torch.tensor([0, expected[2] - 1]))
    assert batch["x"].shape == (2, 96, variates) and batch["y"].shape == (2, 720, variates)


def test_scaler_constant_column_and_torch_inputs():
    from damcha_ts.data import StandardScaler

    values = np.array([[1.0, 5.0], [3.0, 5.0], [5.0, 5.0]])
    scaler = StandardScaler.fit(values)
    np.testing.assert_array_equal(scaler.scale_, [np.sqrt(8 / 3), 1.0])  # population std; constant -> 1
    np.testing.assert_allclose(scaler.transform(values)[:, 1], 0.0)
    tensor = torch.tensor(values, dtype=torch.float32)
    np.testing.assert_allclose(scaler.inverse_transform(scaler.transform(tensor)).numpy(), values, rtol=1e-6)
    assert scaler.select([-1]).mean_.tolist() == [5.0]
