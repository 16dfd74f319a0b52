"""User data: CSV, wide and long DataFrames and arrays load identically; each bad input its error."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from damcha_ts.data import DataWarning, load_frame, prepare_series
from damcha_ts.errors import ConfigError, DataError, DatasetNotFoundError

SPLITS = ("train", "val", "test")


@pytest.fixture(scope="module")
def user_wide(benchmark_frame) -> pd.DataFrame:
    """2,000 real ETTh1 rows as a user would hold them: a ``date`` column and three variates."""
    frame = benchmark_frame("ETTh1").iloc[:2000][["HUFL", "MUFL", "OT"]].reset_index()
    frame.attrs.clear()
    return frame


def _all_windows(data) -> dict[str, dict[str, torch.Tensor]]:
    return {s: data.windows(s).batch(torch.arange(data.window_count(s))) for s in SPLITS}


def test_wide_long_csv_and_array_give_identical_windows(user_wide, tmp_path):
    options = dict(seq_len=48, pred_len=24)
    wide_column = prepare_series(user_wide, **options)
    wide_index = prepare_series(user_wide.set_index("date"), **options)
    long = user_wide.melt(id_vars="date", var_name="id", value_name="value").rename(columns={"date": "time"})
    # Time order within an id must not matter; variates keep the order their ids first appear in.
    id_rank = {"HUFL": 0, "MUFL": 1, "OT": 2}
    long = long.sample(frac=1.0, random_state=0).sort_values("id", kind="stable", key=lambda ids: ids.map(id_rank))
    from_long = prepare_series(long, **options)
    user_wide.to_csv(tmp_path / "mine.csv", index=False)
    user_wide.to_csv(tmp_path / "mine.csv.gz", index=False)
    from_csv = prepare_series(tmp_path / "mine.csv", **options)
    from_gz = prepare_series(str(tmp_path / "mine.csv.gz"), **options)
    from_array = prepare_series(
        user_wide[["HUFL", "MUFL", "OT"]].to_numpy(), freq="h", start=user_wide["date"].iloc[0], columns=["HUFL", "MUFL", "OT"], **options
    )

    reference = _all_windows(wide_column)
    assert wide_column.borders == {"train": (0, 1400), "val": (1352, 1600), "test": (1552, 2000)}  # 70/10/20
    for other in (wide_index, from_long, from_csv, from_gz, from_array):
        assert other.columns == ["HUFL", "MUFL", "OT"] and other.freq == "h"
        assert other.borders == wide_column.borders
        windows = _all_windows(other)
        for split in SPLITS:
            for key, tensor in reference[split].items():
                assert torch.equal(windows[split][key], tensor), (split, key)
    # Independent check of one window against the raw numbers.
    raw = user_wide[["HUFL", "MUFL", "OT"]].to_numpy()
    train = raw[:1400]
    expected_x = (raw[1552 + 5 : 1552 + 5 + 48] - train.mean(0)) / train.std(0)
    np.testing.assert_allclose(reference["test"]["x"][5].numpy(), expected_x, rtol=1e-5, atol=1e-5)


def test_explicit_fractions_and_borders(user_wide):
    by_fraction = prepare_series(user_wide, seq_len=48, pred_len=24, split=(0.6, 0.2, 0.2))
    assert by_fraction.borders == {"train": (0, 1200), "val": (1152, 1600), "test": (1552, 2000)}
    borders = {"train": (0, 1000), "val": (952, 1500), "test": (1452, 2000)}
    explicit = prepare_series(user_wide, seq_len=48, pred_len=24, split=borders)
    assert explicit.borders == borders and explicit.window_count("train") == 1000 - 48 - 24 + 1
    np.testing.assert_allclose(explicit.scaler.mean_, user_wide[["HUFL", "MUFL", "OT"]].to_numpy()[:1000].mean(0))


def _csv(tmp_path, text: str):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    return path


def _hourly(n: int, **columns) -> str:
    stamps = pd.date_range("2021-01-01", periods=n, freq="h").strftime("%Y-%m-%d %H:%M:%S")
    lines = ["date," + ",".join(columns)] + [",".join([stamps[i]] + [str(v[i]) for v in columns.values()]) for i in range(n)]
    return "\n".join(lines) + "\n"


def test_missing_file(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="no such file: .*absent.csv"):
        prepare_series(tmp_path / "absent.csv")


def test_no_time_column(tmp_path):
    with pytest.raises(DataError, match=r"bad.csv: no time column.*\['a', 'b'\]"):
        prepare_series(_csv(tmp_path, "a,b\n1,2\n3,4\n"))
    with pytest.raises(DataError, match="time column 'when' not found"):
        load_frame(pd.DataFrame({"a": [1.0]}), time_col="when")


def test_unparsable_timestamp_names_column_and_row(tmp_path):
    text = _hourly(5, a=range(5)).replace("2021-01-01 02:00:00", "2021-13-45 02:00:00")
    with pytest.raises(DataError, match=r"time column 'date' row 2 \(line 4\) holds '2021-13-45 02:00:00'"):
        prepare_series(_csv(tmp_path, text))
    with pytest.raises(DataError, match="row 1 holds 'yesterday'"):
        load_frame(pd.DataFrame({"date": ["2021-01-01", "yesterday"], "a": [1.0, 2.0]}), date_format="%Y-%m-%d")


def test_non_numeric_column_names_column_and_row(tmp_path):
    text = _hourly(6, a=range(6), b=[1, 2, 3, "n/a?", 5, 6])
    with pytest.raises(DataError, match=r"column 'b' is not numeric: row 3 \(line 5\) holds 'n/a\?'"):
        prepare_series(_csv(tmp_path, text))


@pytest.mark.parametrize("bad", ["nan", "inf", ""])
def test_non_finite_value_names_column_and_first_row(tmp_path, bad):
    text = _hourly(6, a=range(6), b=[1, 2, 3, 4, bad, 6])
    with pytest.raises(DataError, match=r"column 'b' row 4 \(line 6\) \(2021-01-01 04:00:00\) is (nan|inf)"):
        load_frame(_csv(tmp_path, text))


def test_fill_policies_are_explicit_opt_ins():
    stamps = pd.date_range("2021-01-01", periods=6, freq="h")
    frame = pd.DataFrame({"a": [np.nan, 1.0, np.inf, 4.0, np.nan, 8.0]}, index=stamps)
    cleaned = frame.replace(np.inf, np.nan)["a"]
    np.testing.assert_array_equal(load_frame(frame, fill="ffill")["a"], cleaned.ffill().bfill())
    np.testing.assert_array_equal(load_frame(frame, fill="interpolate")["a"], [1.0, 1.0, 2.5, 4.0, 6.0, 8.0])
    np.testing.assert_array_equal(load_frame(frame, fill="zero")["a"], cleaned.fillna(0.0))
    with pytest.raises(ConfigError, match="fill must be"):
        load_frame(frame, fill="mean")


def test_duplicate_and_irregular_timestamps_are_errors_for_user_data():
    stamps = list(pd.date_range("2021-01-01", periods=8, freq="h"))
    duplicate = pd.DataFrame({"a": np.arange(8.0)}, index=pd.DatetimeIndex(stamps[:4] + [stamps[3]] + stamps[5:]))
    with pytest.raises(DataError, match=r"duplicate timestamp 2021-01-01 03:00:00 at row 4.*allow_irregular=True"):
        load_frame(duplicate)
    with pytest.warns(DataWarning, match="duplicate timestamp"):
        kept = load_frame(duplicate, allow_irregular=True)
    assert len(kept) == 8 and kept.attrs["damcha_ts"]["freq"] == "h"

    gap = pd.DataFrame({"a": np.arange(7.0)}, index=pd.DatetimeIndex(stamps[:3] + stamps[4:]))
    with pytest.raises(DataError, match=r"irregular step at row 3 \(2021-01-01 04:00:00 comes 0 days 02:00:00"):
        load_frame(gap)
    backwards = pd.DataFrame({"a": np.arange(8.0)}, index=pd.DatetimeIndex(stamps[:2] + [stamps[5]] + stamps[2:5] + stamps[6:]))
    with pytest.raises(DataError, match="timestamps go backwards at row 3"):
        load_frame(backwards)


def test_split_shorter_than_window_says_the_minimum(user_wide):
    with pytest.raises(DataError, match=r"the val split has 248 rows.*at least seq_len \+ pred_len = 298"):
        prepare_series(user_wide, seq_len=48, pred_len=250)
    with pytest.raises(DataError, match="ett_hour split needs 14400 rows"):
        prepare_series(user_wide, split="ett_hour")


def test_missing_target_for_s_and_ms(user_wide):
    frame = user_wide.rename(columns={"OT": "oil_temp"})
    for mode in ("S", "MS"):
        with pytest.raises(ConfigError, match=r"target column 'OT' \(needed for features='%s'\) not found.*oil_temp" % mode):
            prepare_series(frame, features=mode, seq_len=48, pred_len=24)
    assert prepare_series(frame, features="M", seq_len=48, pred_len=24).target is None  # M needs no target
    assert prepare_series(frame, features="S", target="oil_temp", seq_len=48, pred_len=24).columns == ["oil_temp"]


@pytest.mark.parametrize(
    ("arguments", "pattern"),
    [
        ({"features": "X"}, "features must be one of"),
        ({"seq_len": 0}, "seq_len must be a positive integer"),
        ({"pred_len": 2.5}, "pred_len must be a positive integer"),
        ({"split": (0.5, 0.5, 0.5)}, "split fractions must be three positive numbers"),
        ({"split": "monthly"}, "split must be one of"),
        ({"split": {"train": (0, 10)}}, "explicit borders need keys"),
        ({"split": {"train": (0, 10), "val": (5, 3000), "test": (0, 20)}}, r"val borders \(5, 3000\)"),
        ({"layout": "tall"}, "layout must be one of"),
    ],
)
def test_bad_arguments_name_the_argument(user_wide, arguments, pattern):
    with pytest.raises(ConfigError, match=pattern):
        prepare_series(user_wide, **arguments)


def test_long_layout_errors(user_wide):
    long = user_wide.melt(id_vars="date", var_name="id", value_name="value")
    with pytest.raises(DataError, match=r"repeats id 'HUFL' at 2016-07-01 00:00:00"):
        load_frame(pd.concat([long, long.iloc[:1]], ignore_index=True))
    with pytest.raises(DataError, match=r"column 'OT' .* is nan"):
        load_frame(long.drop(index=long.index[-2]))  # one (id, time) pair missing inside the span: a gap to fill
    # An id that ends (or starts) apart: a ragged series, never filled with invented values (issue 32).
    with pytest.raises(DataError, match=r"id 'OT' runs from 2016-07-01 00:00:00 to 2016-09-22 06:00:00, the ids "
                                        r"together from 2016-07-01 00:00:00 to 2016-09-22 07:00:00.*entity_col='id'"):
        load_frame(long.drop(index=long.index[-1]))


def test_array_needs_a_frequency():
    with pytest.raises(ConfigError, match="freq is required"):
        load_frame(np.zeros((10, 2)))
    with pytest.raises(ConfigError, match="2 names given for an array with 3 columns"):
        load_frame(np.zeros((10, 3)), freq="h", columns=["a", "b"])


def test_a_bad_frequency_string_names_its_argument():
    stamps = pd.date_range("2018-01-01", periods=40, freq="h")
    frame = pd.DataFrame({"OT": np.arange(40.0)}, index=stamps)
    with pytest.raises(ConfigError, match=r"freq='hourly' is not a pandas frequency string"):
        load_frame(frame, freq="hourly")
    with pytest.raises(ConfigError, match=r"freq='hourly' is not a pandas frequency string"):
        load_frame(np.zeros((10, 2)), freq="hourly")
    with pytest.raises(ConfigError, match=r"time_features_freq='bogus' is not a pandas frequency string"):
        prepare_series(frame, seq_len=4, pred_len=2, time_features_freq="bogus")


def test_a_given_frequency_must_be_the_one_the_timestamps_step_by():
    mondays = pd.date_range("2021-06-07", periods=6, freq="W-MON")
    weekly = pd.DataFrame({"OT": np.arange(6.0)}, index=mondays)
    assert load_frame(weekly, freq="W-MON").attrs["damcha_ts"]["freq"] == "W-MON"
    with pytest.raises(DataError, match=r"freq='W' does not match the timestamps: row 1 is 2021-06-14 00:00:00, "
                                        r"but one 'W' step after 2021-06-07 00:00:00 is 2021-06-13"):
        load_frame(weekly, freq="W")  # "W" means Sundays
    hourly = pd.DataFrame({"OT": np.arange(6.0)}, index=pd.date_range("2021-06-07", periods=6, freq="h"))
    with pytest.raises(DataError, match=r"freq='D' does not match the timestamps"):
        load_frame(hourly, freq="D")
    month_ends = pd.DataFrame({"OT": np.arange(6.0)}, index=pd.date_range("2021-01-31", periods=6, freq="ME"))
    assert len(load_frame(month_ends, freq="ME")) == 6  # calendar offsets too


def test_a_column_name_used_twice_is_an_error():
    frame = pd.DataFrame(np.zeros((10, 3)), index=pd.date_range("2021-01-01", periods=10, freq="h"),
                         columns=["a", "a", "OT"])
    with pytest.raises(DataError, match=r"DataFrame: column name\(s\) \['a'\] appear more than once"):
        load_frame(frame)


def _neuralforecast_frame(rows: int = 80) -> pd.DataFrame:
    """A neuralforecast-style long frame: ``unique_id, ds, y``."""
    stamps = pd.date_range("2021-01-04", periods=rows, freq="D")
    return pd.concat(
        [pd.DataFrame({"unique_id": name, "ds": stamps, "y": np.sin(np.arange(rows) / 5.0) + shift})
         for shift, name in enumerate(["store_1", "store_2"])],
        ignore_index=True,
    )


def test_a_neuralforecast_frame_reads_without_options(tmp_path):
    frame = _neuralforecast_frame()
    wide = load_frame(frame)
    assert list(wide.columns) == ["store_1", "store_2"] and len(wide) == 80
    np.testing.assert_array_equal(wide["store_2"].to_numpy(), frame.loc[frame.unique_id == "store_2", "y"].to_numpy())
    path = tmp_path / "nf.csv"
    frame.to_csv(path, index=False)
    from_file = load_frame(path)
    assert list(from_file.columns) == list(wide.columns) and from_file.index.equals(wide.index)
    np.testing.assert_allclose(from_file.to_numpy(), wide.to_numpy(), rtol=1e-12)  # CSV text rounds the last digit
    # Our own names win when both conventions are there, and named columns always do.
    with pytest.raises(DataError, match=r"long file \(id, ds, value\) but also has column\(s\) \['unique_id', 'y'\]"):
        load_frame(frame.assign(id=frame.unique_id, value=frame.y))
    assert list(load_frame(frame, id_col="unique_id", value_col="y").columns) == ["store_1", "store_2"]


def test_a_forecast_of_a_neuralforecast_frame_comes_back_with_its_column_names():
    from damcha_ts import Forecaster

    forecaster = Forecaster("itransformer_mha", horizon=4, lookback=16, max_epochs=1, d_model=16, d_ff=16, n_heads=2,
                            e_layers=1, trainer_kwargs={"enable_progress_bar": False, "logger": False})
    future = forecaster.fit(_neuralforecast_frame()).predict()
    assert list(future.columns) == ["unique_id", "ds", "y"] and len(future) == 8
    assert set(future.unique_id) == {"store_1", "store_2"}
