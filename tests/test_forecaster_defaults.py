"""Defaults that fit a user's data (issue 20): a model size that follows the data, a warning when a
split has too few windows, non-negative forecasts, a quiet fit, time marks at the data's own
frequency, and errors that speak Python in Python."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest

from damcha_ts import Forecaster
from damcha_ts.data import DataWarning, prepare
from damcha_ts.errors import ConfigError, DataError
from damcha_ts.models import build_model, count_parameters
from damcha_ts.models.sizing import SIZE_KEYS, data_sized, size_for_series

QUICK = {"limit_train_batches": 2, "limit_val_batches": 2}


@pytest.fixture(scope="module")
def weekly() -> pd.DataFrame:
    """The issue's case: 7 variates, 966 weekly rows."""
    rng = np.random.default_rng(0)
    t = np.arange(966)
    index = pd.date_range("2005-01-02", periods=966, freq="W-SUN")
    return pd.DataFrame({f"v{i}": 10 + np.sin(t / 8 + i) + 0.1 * rng.standard_normal(966) for i in range(7)}, index=index)


@pytest.fixture(scope="module")
def daily_sales() -> pd.DataFrame:
    """Counts that are often 0: an unclipped forecast goes below 0."""
    t = np.arange(800)
    rng = np.random.default_rng(1)
    index = pd.date_range("2021-01-04", periods=800, freq="D")
    return pd.DataFrame({"sales": np.maximum(0, 3 * np.sin(t / 4)) + rng.poisson(0.2, 800),
                         "returns": np.maximum(0, 2 * np.cos(t / 5))}, index=index)


@pytest.fixture(scope="module")
def weekly_fit(weekly):
    with pytest.warns(DataWarning) as caught:
        forecaster = Forecaster("itransformer_damcha", horizon=96, lookback=96, max_epochs=1, trainer_kwargs=QUICK)
        before = dict(forecaster.model_config)
        forecaster.fit(weekly)
    return forecaster, before, [str(w.message) for w in caught if issubclass(w.category, DataWarning)]


def test_user_data_gets_a_model_sized_to_it(weekly_fit, weekly):
    forecaster, before, _ = weekly_fit
    assert before["d_model"] == 512  # before fit: what was given (the class defaults for the rest)
    config = forecaster.model_config
    assert (config["d_model"], config["d_ff"], config["e_layers"], config["n_heads"]) == (64, 64, 2, 4)
    assert config["generator_hidden"] == (32, 64)
    result = forecaster.fit_result_
    assert result["n_params"] == count_parameters(forecaster.model_) < 1_000_000  # not 22.4M
    assert result["windows"] == {"train": 485, "val": 2, "test": 98}
    # Gateformer-DAMCHA on the same data: well under 1M too (33.2M at the class defaults).
    series = prepare(weekly, seq_len=96, pred_len=96, time_features_freq=None)
    gateformer = build_model({"name": "gateformer_damcha", "seq_len": 96, "pred_len": 96, **size_for_series(series)})
    assert count_parameters(gateformer) < 1_000_000


def test_time_marks_of_weekly_data_follow_its_own_frequency(weekly_fit):
    forecaster, _, _ = weekly_fit
    assert forecaster.meta_.freq == "W-SUN" and forecaster.meta_.time_features_freq == "W-SUN"
    assert forecaster.panel_.mark_names == ["day_of_month", "week_of_year"]  # not the hourly four


def test_two_validation_windows_are_a_warning_with_the_counts_and_a_way_out(weekly_fit):
    messages = weekly_fit[2]
    assert len(messages) == 1
    assert "validation split has 2 window(s)" in messages[0] and "shorter lookback or horizon" in messages[0]
    assert "val_size=" in messages[0]


def test_enough_windows_give_no_warning(daily_sales):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        Forecaster("itransformer_mha", horizon=7, lookback=14, max_epochs=1, trainer_kwargs=QUICK).fit(daily_sales)
    with pytest.warns(DataWarning, match="train split has .* fewer than one batch of 1024"):
        Forecaster("itransformer_mha", horizon=7, lookback=14, max_epochs=1, batch_size=1024,
                   trainer_kwargs=QUICK).fit(daily_sales)


def test_given_size_keys_win_and_the_rest_follow_them():
    assert data_sized(7, 485)["d_model"] == 64
    assert data_sized(7, 485, {"d_model": 128}) == {"d_model": 128, "d_ff": 128, "e_layers": 2, "n_heads": 8,
                                                   "generator_hidden": (64, 128)}
    assert data_sized(7, 485, {"n_heads": 3})["d_model"] == 66  # a multiple of the given heads
    assert data_sized(7, 8449)["d_model"] == 256  # ETTh1's protocol: the width of its official config
    assert data_sized(21, 36_696)["d_model"] == 512 and data_sized(1, 20)["d_model"] == 16
    given = {"d_model": 16, "d_ff": 16, "e_layers": 1, "n_heads": 2, "generator_hidden": (8,)}
    assert data_sized(7, 485, given) == given


def test_explicit_sizes_benchmarks_configs_and_loads_keep_their_size(weekly, data_root, tmp_path):
    series = prepare(weekly, seq_len=96, pred_len=96, time_features_freq=None)
    explicit = Forecaster("itransformer_damcha", horizon=96, lookback=96, d_model=32)
    config = explicit.estimator().sized_config(series)
    assert (config["d_model"], config["d_ff"], config["n_heads"]) == (32, 32, 2)
    default = Forecaster("itransformer_damcha", horizon=24, lookback=48)
    benchmark = prepare("ETTh1", seq_len=48, pred_len=24, path=str(data_root / "ETTh1.csv.gz"))
    assert default.estimator().sized_config(benchmark) == default.model_config  # d_model 512 as before
    configured = Forecaster.from_config("itransformer_damcha/etth1", horizon=96)
    assert all(k in configured.estimator().given_model for k in SIZE_KEYS) and configured.model_config["d_model"] == 256
    assert configured.estimator().sized_config(series) == configured.model_config


def test_nonnegative_clips_forecasts_quantiles_and_intervals_and_is_saved(daily_sales, tmp_path):
    settings = dict(horizon=14, lookback=28, max_epochs=1, quantiles=[0.1, 0.9], trainer_kwargs=QUICK)
    raw = Forecaster("itransformer_mha", **settings).fit(daily_sales).predict()
    model = Forecaster("itransformer_mha", nonnegative=True, **settings).fit(daily_sales)
    clipped = model.predict()
    assert raw.to_numpy().min() < 0  # the same model unclipped
    np.testing.assert_array_equal(clipped.to_numpy(), np.maximum(raw.to_numpy(), 0.0))
    loaded = Forecaster.load(model.save(tmp_path / "m"))
    assert loaded.nonnegative and loaded.meta_.nonnegative
    pd.testing.assert_frame_equal(loaded.predict(), clipped)
    assert (model.backtest(daily_sales, n_windows=2)["forecast"] >= 0).all()
    # evaluate scores the clipped forecasts: never worse than the same model unclipped.
    model.meta_.nonnegative = False
    unclipped = model.evaluate()
    model.meta_.nonnegative = True
    scores = model.evaluate()
    assert scores["mse_inverse"] < unclipped["mse_inverse"] and scores["windows"] == unclipped["windows"]
    assert model.predict(level=80).to_numpy().min() >= 0
    # Intervals are scored as predict gives them, clipped: against a slow reference of clipped bands.
    from damcha_ts.forecasting.intervals import interval
    from damcha_ts.forecasting.window_scores import split_forecasts

    predictor, widths, covered = model.predictor, [], []
    for point, quantile_values, truth in split_forecasts(predictor, model.panel_.series[0], "test"):
        lo, hi = interval(point, predictor.calibration, 80, quantile_values=quantile_values, quantiles=predictor.quantiles)
        lo, hi = np.maximum(lo, 0.0), np.maximum(hi, 0.0)
        widths.append((hi - lo).ravel())
        covered.append(((truth >= lo) & (truth <= hi)).ravel())
    scores = model.evaluate(level=[80])
    assert scores["width_80"] == pytest.approx(np.concatenate(widths).mean(), rel=1e-9)
    assert scores["coverage_80"] == pytest.approx(np.concatenate(covered).mean(), rel=1e-9)
    # A directory saved before the field existed loads as not clipped.
    from damcha_ts.training.artifacts import content_digest

    document_path = tmp_path / "m" / "forecaster.json"
    document = json.loads(document_path.read_text())
    del document["data"]["nonnegative"]
    document["content_sha256"] = content_digest(document)
    document_path.write_text(json.dumps(document))
    assert not Forecaster.load(tmp_path / "m").nonnegative
    with pytest.raises(ConfigError, match="nonnegative must be True or False"):
        Forecaster(nonnegative="yes")


def test_fit_is_quiet_by_default_and_verbose_on_request(daily_sales, capfd, caplog):
    """Nothing on stdout; without verbose no device lines, model summary or logging-interval warning
    (Lightning logs to the root logger's handlers when there are some, as under pytest: caplog)."""
    import logging

    settings = dict(horizon=7, lookback=14, max_epochs=1, trainer_kwargs=QUICK)
    noise = ("GPU available", "TPU available", "Total params", "log_every_n_steps")

    def said(fit) -> tuple[str, str]:
        capfd.readouterr()
        caplog.clear()
        with caplog.at_level(logging.INFO), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fit()
        out, err = capfd.readouterr()
        return out, err + caplog.text + "".join(str(w.message) for w in caught)

    out, err = said(lambda: Forecaster("itransformer_mha", **settings).fit(daily_sales))
    assert out == "" and not [text for text in noise if text in err]
    assert "epoch 1/1" in err  # one line per epoch on stderr (not a terminal), as damcha-ts fit
    out, err = said(lambda: Forecaster("itransformer_mha", verbose=True, **settings).fit(daily_sales))
    assert out == ""  # the progress bar goes to stderr too
    assert all(text in err for text in noise) and "parameters (d_model=" in err


def test_python_errors_name_python_keywords_and_the_cli_keeps_its_flags(tmp_path, daily_sales, capsys):
    from damcha_ts.cli.main import main
    from damcha_ts.data import load_frame

    frame = daily_sales.reset_index(drop=True)
    with pytest.raises(DataError, match=r"Pass time_col=\.\.\. to name it") as raised:
        load_frame(frame)
    assert "--time-col" not in str(raised.value) and "--time-col" in raised.value.cli_message()
    model = Forecaster("itransformer_mha", horizon=7, lookback=14, max_epochs=1, trainer_kwargs=QUICK)
    model.fit(daily_sales.to_numpy(), freq="D").save(tmp_path / "numpy_model")
    with pytest.raises(ConfigError) as raised:
        Forecaster.load(tmp_path / "numpy_model").evaluate()
    assert "evaluate(frame)" in str(raised.value) and "--" not in str(raised.value)
    capsys.readouterr()
    assert main(["evaluate", "--model", str(tmp_path / "numpy_model")]) == 2
    err = capsys.readouterr().err
    assert "--dataset FILE" in err and "evaluate(frame)" not in err


def test_the_command_line_sizes_a_csv_model_as_fit_does(weekly, tmp_path):
    from damcha_ts.cli.fit import resolve_cli_config
    from damcha_ts.cli.main import build_parser

    path = tmp_path / "weekly.csv"
    weekly.to_csv(path, index_label="date")

    def model(*extra: str) -> dict:
        args = build_parser().parse_args(["fit", "--data", str(path), "--model", "itransformer_damcha_static",
                                          "--horizon", "96", "--out", str(tmp_path / "o"), *extra])
        return resolve_cli_config(args)[0].model_dict()

    sized = model()
    assert (sized["d_model"], sized["d_ff"], sized["generator_hidden"], sized["static_metric"]) == (64, 64, [32, 64], True)
    given = model("--set", "model.d_model=128")
    assert (given["d_model"], given["d_ff"], given["n_heads"]) == (128, 128, 8)
    args = build_parser().parse_args(["fit", "--data", "ETTh1", "--model", "itransformer_damcha", "--horizon", "96",
                                      "--out", str(tmp_path / "b")])
    assert resolve_cli_config(args)[0].model_dict()["d_model"] == 256  # the official ETTh1 config


def test_a_yearly_series_fits_with_no_time_marks():
    """GluonTS has no calendar features for yearly data: the marks are [T, 0] and every family still
    fits (before: ConfigError "GluonTS gives no time features for it" from a plain yearly frame)."""
    import numpy as np
    import pandas as pd

    from damcha_ts import Forecaster

    rng = np.random.default_rng(0)
    years = pd.date_range("1700-01-01", periods=200, freq="YS")
    frame = pd.DataFrame({"date": years, "sunspots": 50 + 40 * np.sin(np.arange(200) * 2 * np.pi / 11)
                          + rng.normal(0, 5, 200)})
    for model in ("itransformer_damcha", "gateformer_mha"):
        fitted = Forecaster(model, horizon=6, lookback=22, max_epochs=1, d_model=16, n_heads=2, e_layers=1,
                            d_ff=16, trainer_kwargs={"enable_progress_bar": False, "logger": False}).fit(frame)
        assert fitted.panel_.series[0].mark_names == []
        forecast = fitted.predict()
        assert forecast.shape == (6, 1) and np.isfinite(forecast.to_numpy()).all()
        assert forecast.index[0] == pd.Timestamp("1900-01-01")


def test_training_keywords_not_given_follow_the_user_data_recipe_and_a_config_keeps_its_own(weekly, tmp_path):
    """Issue 34: Forecaster's training defaults are TrainingConfig.for_user_data (the batch size from
    the data's train windows at fit); an epoch budget given validates per epoch; a benchmark config
    and a saved model train as they say; the command line's --data FILE trains the same recipe."""
    import yaml

    from damcha_ts.training.config import USER_DATA_DEFAULTS, TrainingConfig, batch_size_for_windows
    from tests.robustness.matrix import run_cli, write_csv

    quick = {"trainer_kwargs": {"enable_progress_bar": False, "logger": False}, "d_model": 16, "n_heads": 2}
    fitted = Forecaster("itransformer_mha", horizon=12, lookback=24, max_steps=30, **quick)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fitted.fit(weekly)
    recipe = {key: getattr(fitted.training, key) for key in USER_DATA_DEFAULTS}
    assert recipe == {**USER_DATA_DEFAULTS, "max_steps": 30}
    assert fitted.training.batch_size == batch_size_for_windows(fitted.panel_.window_count("train")) == 16
    epochs = Forecaster("itransformer_mha", horizon=12, lookback=24, max_epochs=2).training
    assert (epochs.max_steps, epochs.val_check_steps, epochs.max_epochs, epochs.lr_schedule) == (None, None, 2, "warmup_cosine")
    configured = Forecaster.from_config("itransformer_mha/etth1").training
    assert configured == TrainingConfig.from_dict({**configured.to_dict()}) and configured.max_steps is None
    assert (configured.learning_rate, configured.lr_schedule, configured.batch_size) == (1e-4, "type1", 32)
    loaded = Forecaster.load(fitted.save(tmp_path / "saved"))
    assert loaded.training == fitted.training

    data = write_csv(weekly.rename_axis("date").reset_index(), tmp_path / "weekly.csv")
    for extra, expected in (((), {**USER_DATA_DEFAULTS, "batch_size": 16}),
                            (("--set", "training.max_epochs=1", "--set", "training.batch_size=8"),
                             {**USER_DATA_DEFAULTS, "max_steps": None, "val_check_steps": None, "max_epochs": 1,
                              "batch_size": 8})):
        out = tmp_path / f"run{len(extra)}"
        args = ["fit", "--data", data, "--model", "itransformer_mha", "--horizon", "12", "--lookback", "24",
                "--set", "model.d_model=16", "--set", "model.n_heads=2", "--no-plot", "--out", out, *extra]
        if not extra:
            args += ["--set", "training.max_steps=20"]
            expected["max_steps"] = 20
        done = run_cli(args)
        assert done.code == 0, done.stderr
        saved = TrainingConfig.from_dict(yaml.safe_load((out / "config.yaml").read_text())["training"])
        assert {key: getattr(saved, key) for key in expected} == expected
