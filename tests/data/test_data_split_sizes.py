"""``val_size`` / ``test_size`` (issue 20): validation and test tails in rows or fractions, ``test_size=0``
for no test split (train on everything but the validation tail), checked against counts by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from damcha_ts.data import ForecastDataModule, describe, prepare
from damcha_ts.data.options import ProtocolOptions, split_options
from damcha_ts.errors import ConfigError


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    """1000 hourly rows, two variates; row i holds i (so a window's rows can be read off its values)."""
    index = pd.date_range("2024-01-01", periods=1000, freq="h", name="date")
    return pd.DataFrame({"a": np.arange(1000.0), "OT": np.arange(1000.0) * 2}, index=index)


def test_test_size_zero_trains_on_everything_but_the_validation_tail(frame):
    data = prepare(frame, seq_len=48, pred_len=24, test_size=0, val_size=100)
    # By hand: 1000 rows, the last 100 are validation targets, no test rows.
    assert data.borders == {"train": (0, 900), "val": (900 - 48, 1000), "test": (1000, 1000)}
    assert data.window_count("train") == 900 - 48 - 24 + 1
    assert data.window_count("val") == 100 - 24 + 1
    assert data.window_count("test") == 0
    assert describe(data)["windows"] == {"train": 829, "val": 77, "test": 0}
    # Every row is used; the scaler is the train rows' only.
    (one,) = data.series
    assert len(one.values) == 1000 and one.scaler.mean_[0] == pytest.approx(np.arange(900.0).mean())
    # The last validation window's target ends at the last row.
    val = data.windows("val")
    assert val[len(val) - 1]["y"][-1, 0] * one.scaler.scale_[0] + one.scaler.mean_[0] == pytest.approx(999.0)


def test_an_empty_test_split_gives_empty_windows_and_loaders(frame):
    data = prepare(frame, seq_len=48, pred_len=24, test_size=0)
    test = data.windows("test")
    assert len(test) == 0
    with pytest.raises(IndexError):
        test[0]
    module = ForecastDataModule(data, batch_size=16)
    assert list(module.test_dataloader()) == []
    assert len(module.datasets["train"]) == data.window_count("train") > 0
    batch = next(iter(module.val_dataloader()))
    assert isinstance(batch["x"], torch.Tensor) and batch["x"].shape[1:] == (48, 2)


def test_fractions_are_of_the_rows_and_match_the_default_split(frame):
    # 10 % and 20 % of 1000 rows: the default 70/10/20 split exactly.
    assert prepare(frame, seq_len=48, pred_len=24, val_size=0.1, test_size=0.2).borders == \
        prepare(frame, seq_len=48, pred_len=24).borders
    # One size given: the other keeps the default split's (custom: 10 % val, 20 % test).
    assert prepare(frame, seq_len=48, pred_len=24, test_size=0).borders["train"] == (0, 900)
    assert prepare(frame, seq_len=48, pred_len=24, val_size=50).borders == {
        "train": (0, 750), "val": (702, 800), "test": (752, 1000)}
    # Row counts, and 3.0 is 3 rows' worth of an integer.
    assert prepare(frame, seq_len=48, pred_len=24, val_size=100.0, test_size=150).borders == {
        "train": (0, 750), "val": (702, 850), "test": (802, 1000)}


def test_a_benchmark_keeps_its_split_unless_sizes_are_given(benchmark_frame):
    frame = benchmark_frame("ETTh1")  # 17420 rows; the protocol uses the first 14400
    assert prepare(frame).borders["test"] == (11424, 14400)
    data = prepare(frame, seq_len=96, pred_len=96, test_size=0)
    # Every row, ETT's 4-month (2880-row) validation tail at the end.
    assert data.borders == {"train": (0, 17420 - 2880), "val": (17420 - 2880 - 96, 17420), "test": (17420, 17420)}
    assert data.series[0].timestamps[-1] == frame.index[-1]
    assert data.window_count("val") == 2880 - 96 + 1


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"val_size": 0}, "val_size=0"),
        ({"val_size": 10}, "val_size=10"),  # fewer rows than one horizon
        ({"test_size": 5}, "test_size=5"),
        ({"val_size": 0.5, "test_size": 0.5}, "val_size=0.5, test_size=0.5"),
        ({"test_size": 1.5}, "test_size"),
        ({"test_size": -1}, "test_size"),
        ({"val_size": "10"}, "val_size"),
        ({"val_size": True}, "val_size"),
    ],
)
def test_impossible_sizes_are_errors_naming_the_argument(frame, options, named):
    with pytest.raises(ConfigError, match=named):
        prepare(frame, seq_len=48, pred_len=24, **options)


def test_sizes_conflict_with_an_explicit_split(frame):
    with pytest.raises(ConfigError, match="split=.*val_size/test_size"):
        prepare(frame, seq_len=48, pred_len=24, split=(0.7, 0.1, 0.2), test_size=0)


def test_sizes_enter_a_run_config_only_when_given():
    from damcha_ts.training.config import RunConfig

    plain = RunConfig.load("itransformer_damcha/etth1")
    assert "val_size" not in plain.to_dict()["data"] and "test_size" not in plain.to_dict()["data"]
    sized = RunConfig.load("itransformer_damcha/etth1", updates={"data": {"test_size": 0, "val_size": "0.2"}})
    assert sized.data.protocol.test_size == 0 and sized.data.protocol.val_size == 0.2
    assert sized.to_dict()["data"]["test_size"] == 0 and sized.config_hash() != plain.config_hash()
    assert RunConfig.load(sized.to_dict()).config_hash() == sized.config_hash()  # round trip
    assert "val_size" not in ProtocolOptions().keywords() and ProtocolOptions(test_size=0).keywords()["test_size"] == 0
    with pytest.raises(ConfigError, match="data.test_size"):
        split_options({"test_size": -3})


def test_a_selection_split_scores_on_the_validation_rows_and_trains_before_them_with_an_inner_tail(frame):
    """Forecaster("auto")'s split: by hand, 1000 rows split 700/100/200; the candidates train on rows
    0-629, stop early on 630-699 and are scored on 700-799; rows 800-999 (the test) are in no split."""
    data = prepare(frame, seq_len=48, pred_len=24, val_size=100, test_size=200).selection_split(70)
    assert data.borders == {"train": (0, 630), "val": (630 - 48, 700), "test": (700 - 48, 800)}
    scaler = data.series[0].scaler
    for split, (first, last) in {"train": (0 + 48, 629), "val": (630, 699), "test": (700, 799)}.items():
        targets = data.windows(split).batch(torch.arange(data.window_count(split)))["y"].numpy()  # [W, H, 2], scaled
        rows = scaler.inverse_transform(targets)[..., 0]  # column "a" holds the row number
        assert rows.min() == pytest.approx(first) and rows.max() == pytest.approx(last)  # no target past row 799
    assert scaler.mean_[0] == pytest.approx(np.arange(630.0).mean())  # refitted on the new train rows


def test_a_selection_split_without_room_for_an_inner_tail_is_refused(frame):
    data = prepare(frame, seq_len=48, pred_len=24, val_size=100, test_size=200)
    with pytest.raises(ConfigError, match="inner validation tail of 10 rows"):
        data.selection_split(10)
    with pytest.raises(ConfigError, match="training window of seq_len \\+ pred_len = 72"):
        data.selection_split(650)
