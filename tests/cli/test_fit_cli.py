"""``damcha-ts fit / predict / evaluate / quickstart`` end to end on real ETTh1 (tiny models)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pandas as pd
import pytest

from damcha_ts.cli.main import main

TINY = ["--set", "model.d_model=16", "--set", "model.d_ff=16", "--set", "model.n_heads=2", "--set", "model.generator_hidden=[8]"]
SHORT = ["--set", "training.max_epochs=1", "--trainer", "limit_train_batches=5", "--trainer", "limit_val_batches=3"]




def run_json(capsys, argv: list[str]) -> dict:
    """Run the CLI in-process; stdout must hold exactly one JSON object."""
    capsys.readouterr()
    assert main(argv) == 0
    out = capsys.readouterr().out
    return json.loads(out)


@pytest.fixture(scope="module")
def fitted_run(tmp_path_factory, data_root):
    out = tmp_path_factory.mktemp("cli") / "run"
    argv = ["fit", "--data", "ETTh1", "--model", "itransformer_damcha", "--horizon", "24", *TINY, *SHORT, "--out", str(out), "--json"]
    stdout = io.StringIO()  # capsys is function-scoped; this fixture is shared by the module
    with contextlib.redirect_stdout(stdout):
        assert main(argv) == 0
    return out, json.loads(stdout.getvalue())


def test_fit_prints_one_json_object_and_writes_the_run(fitted_run):
    out, result = fitted_run
    assert result["model"] == "itransformer_damcha" and result["dataset"] == "ETTh1" and result["horizon"] == 24
    assert result == json.loads((out / "metrics.json").read_text()) | {"plot": str(out / "forecast.png")}
    assert result["test_windows"] == 2857 and result["train_batches_per_epoch"] == 5
    for name in ("config.yaml", "metrics_per_step.csv", "metrics_per_variate.csv", "forecast.png", "logs/metrics.csv", "model/weights.pt"):
        assert (out / name).is_file(), name
    # Without --config the official ETTh1 config was used, with the --set overrides on top.
    config = (out / "config.yaml").read_text()
    assert "seed: 2023" in config and "d_model: 16" in config and "batch_size: 32" in config


def test_resuming_a_finished_run_trains_nothing_and_reports_the_same_scores(fitted_run, tmp_path, capsys):
    import shutil

    out, result = fitted_run
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    argv = ["fit", "--data", "ETTh1", "--model", "itransformer_damcha", "--horizon", "24", *TINY, *SHORT,
            "--out", str(copy), "--resume", "--no-plot"]
    capsys.readouterr()
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert f"test MSE {result['mse']:.4f}" in printed and "no epoch trained by this call" in printed
    assert json.loads((copy / "metrics.json").read_text())["epochs_run"] == result["epochs_run"]


def test_predict_writes_the_future_after_the_input(fitted_run, data_root, tmp_path, capsys):
    out, _ = fitted_run
    history = pd.read_csv(data_root / "ETTh1.csv.gz").iloc[3000:3200]
    history.to_csv(tmp_path / "history.csv", index=False)
    summary = run_json(capsys, ["predict", "--model", str(out), "--input", str(tmp_path / "history.csv"), "--output", str(tmp_path / "forecast.csv"), "--json"])
    forecast = pd.read_csv(tmp_path / "forecast.csv", parse_dates=["date"])
    last = pd.Timestamp(history["date"].iloc[-1])
    assert list(forecast["date"]) == [last + pd.Timedelta(hours=k) for k in range(1, 25)]
    assert list(forecast.columns) == list(history.columns) and summary["rows"] == 24

    from damcha_ts import Forecaster

    expected = Forecaster.load(out).predict(history.set_index(pd.to_datetime(history["date"])).drop(columns="date"))
    pd.testing.assert_frame_equal(forecast.set_index("date"), expected, check_freq=False, check_names=False, rtol=1e-12)


def test_predict_keeps_a_long_layout(fitted_run, data_root, tmp_path, capsys):
    out, _ = fitted_run
    history = pd.read_csv(data_root / "ETTh1.csv.gz").iloc[3000:3200]
    history.melt(id_vars="date", var_name="sensor", value_name="reading").to_csv(tmp_path / "long.csv", index=False)
    run_json(capsys, ["predict", "--model", str(out), "--input", str(tmp_path / "long.csv"), "--id-col", "sensor", "--value-col", "reading", "--output", str(tmp_path / "f.csv"), "--json"])
    forecast = pd.read_csv(tmp_path / "f.csv")
    assert list(forecast.columns) == ["date", "sensor", "reading"] and len(forecast) == 24 * 7
    # Another column order comes back in that order; the summary still finds the time column.
    long = history.melt(id_vars="date", var_name="sensor", value_name="reading")[["sensor", "reading", "date"]]
    long.to_csv(tmp_path / "long2.csv", index=False)
    summary = run_json(capsys, ["predict", "--model", str(out), "--input", str(tmp_path / "long2.csv"), "--id-col", "sensor",
                                "--value-col", "reading", "--output", str(tmp_path / "f2.csv"), "--json"])
    assert summary["columns"] == ["sensor", "reading", "date"]
    assert summary["first_timestamp"] == str(pd.Timestamp(history["date"].iloc[-1]) + pd.Timedelta(hours=1))


def test_predict_errors_name_the_input_file_and_line_and_the_output_folder(fitted_run, data_root, tmp_path, capsys):
    out, _ = fitted_run
    history = pd.read_csv(data_root / "ETTh1.csv.gz").iloc[3000:3200]
    history["HUFL"] = history["HUFL"].astype(object)
    history.iloc[5, history.columns.get_loc("HUFL")] = "abc"
    history.to_csv(tmp_path / "bad.csv", index=False)
    capsys.readouterr()
    assert main(["predict", "--model", str(out), "--input", str(tmp_path / "bad.csv")]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / "bad.csv") in err and "line 7" in err and "'abc'" in err  # header is line 1

    history.iloc[5, history.columns.get_loc("HUFL")] = 1.0
    history.to_csv(tmp_path / "good.csv", index=False)
    assert main(["predict", "--model", str(out), "--input", str(tmp_path / "good.csv"),
                 "--output", str(tmp_path / "no" / "such" / "forecast.csv")]) == 2
    assert "--output" in capsys.readouterr().err and not (tmp_path / "no").exists()
    assert main(["predict", "--model", str(out), "--input", str(tmp_path / "good.csv"), "--output", str(tmp_path)]) == 2
    assert f"--output {tmp_path}: is a folder" in capsys.readouterr().err


def test_predict_without_input_names_what_a_numpy_model_needs(data_root, tmp_path, capsys):
    import numpy as np

    from damcha_ts import Forecaster

    values = pd.read_csv(data_root / "ETTh1.csv.gz").drop(columns="date").to_numpy()[:600]
    quick = {"enable_progress_bar": False, "logger": False, "limit_train_batches": 2, "limit_val_batches": 2}
    model = Forecaster("itransformer_mha", horizon=24, lookback=48, max_epochs=1, d_model=16, d_ff=16, n_heads=2,
                       trainer_kwargs=quick).fit(np.asarray(values), freq="h")
    model.save(tmp_path / "numpy_model")
    capsys.readouterr()
    assert main(["predict", "--model", str(tmp_path / "numpy_model")]) == 2
    err = capsys.readouterr().err
    assert "NumPy" in err and "--input history.csv" in err


def test_evaluate_reproduces_the_fit_metrics(fitted_run, capsys):
    out, result = fitted_run
    scores = run_json(capsys, ["evaluate", "--model", str(out), "--json"])
    assert (scores["mse"], scores["mae"], scores["windows"]) == (result["mse"], result["mae"], result["test_windows"])
    other = run_json(capsys, ["evaluate", "--model", str(out), "--dataset", "ETTh2", "--json"])
    assert other["dataset"] == "ETTh2" and other["mse"] != scores["mse"]


def test_fit_from_a_config_file(tmp_path, data_root, capsys):
    config = tmp_path / "mine.yaml"
    config.write_text("extends: itransformer_mha/etth2   # a shipped config\nmodel:\n  d_model: 16\n  d_ff: 16\n")
    result = run_json(capsys, ["fit", "--config", str(config), "--horizon", "48", *SHORT, "--out", str(tmp_path / "r"), "--no-plot", "--json"])
    assert (result["model"], result["dataset"], result["horizon"]) == ("itransformer_mha", "ETTh2", 48)
    assert not (tmp_path / "r" / "forecast.png").exists()


def test_fit_errors_exit_2_and_name_the_problem(tmp_path, capsys):
    assert main(["fit", "--data", "ETTh1", "--model", "itransformer_mha", "--set", "model.d_modle=3", "--out", str(tmp_path)]) == 2
    assert "model.d_modle" in capsys.readouterr().err
    assert main(["fit", "--config", "itransformer_mha/etth1", "--data", "ETTh1", "--out", str(tmp_path)]) == 2
    assert "either --config or --data" in capsys.readouterr().err
    assert main(["fit", "--data", "ETTh1", "--model", "itransformer", "--out", str(tmp_path)]) == 2
    assert "--model 'itransformer'" in capsys.readouterr().err


def test_fit_never_trains_over_an_earlier_run_unless_told(fitted_run, tmp_path, capsys):
    """A typo in --out, bad Trainer arguments or data that cannot make a window must not cost a
    finished run: its files stay as they were."""
    import shutil

    out, _ = fitted_run
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    before = {path: path.read_bytes() for path in copy.rglob("*") if path.is_file()}
    base = ["fit", "--data", "ETTh1", "--model", "gateformer_mha", "--horizon", "24", *SHORT, "--out", str(copy)]
    for extra, message in (
        ([], "already holds a run (checkpoints, logs, model, metrics.json); add --resume to continue it, --overwrite"),
        (["--overwrite", "--trainer", "foo=1"], "--trainer: foo is not a lightning.Trainer argument"),
        (["--overwrite", "--trainer", "max_steps=["], "--trainer 'max_steps=[': the value is not valid YAML"),
        (["--overwrite", "--strategy", "foo"], "lightning.Trainer rejected the run's arguments"),
        (["--overwrite", "--lookback", "20000"], "one window needs at least seq_len + pred_len = 20024"),
        (["--overwrite", "--resume"], "give one"),
    ):
        assert main([*base, *extra]) == 2, extra
        assert message in capsys.readouterr().err, extra
        assert {path: path.read_bytes() for path in copy.rglob("*") if path.is_file()} == before, extra
    assert main([*base[:-2], "--out", str(copy / "config.yaml")]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err


def test_unwritable_paths_are_one_line_errors(fitted_run, tmp_path, capsys):
    out, _ = fitted_run
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where a folder should be")
    assert main(["predict", "--model", str(out), "--output", str(blocked / "forecast.csv")]) == 2
    error = capsys.readouterr().err
    assert error.startswith("damcha-ts: error:") and "Traceback" not in error and str(blocked) in error
    assert main(["fit", "--data", "ETTh1", "--model", "itransformer_mha", "--pred-len", "24", *TINY, *SHORT,
                 "--out", str(blocked / "run")]) == 2
    error = capsys.readouterr().err
    assert error.startswith("damcha-ts: error:") and str(blocked) in error


def test_quickstart_reports_the_published_itransformer_figure(tmp_path, data_root, capsys):
    result = run_json(capsys, ["quickstart", "--out", str(tmp_path / "q"), *TINY, *SHORT, "--json"])
    # protocol.md §4, ETTh1 H=96: iTransformer 0.386 / 0.405.
    assert result["published_itransformer"] == {"mse": 0.386, "mae": 0.405}
    assert (result["model"], result["dataset"], result["horizon"]) == ("itransformer_damcha", "ETTh1", 96)
    assert Path(result["plot"]).is_file() and result["test_windows"] == 2785


def test_a_csv_given_by_a_relative_path_is_recorded_by_its_absolute_path(tmp_path, monkeypatch):
    from damcha_ts.cli.fit import default_config

    (tmp_path / "series.csv").write_text("date,OT\n2020-01-01,1\n")
    monkeypatch.chdir(tmp_path)
    assert default_config("series.csv", "itransformer_mha")["data"]["dataset"] == str(tmp_path / "series.csv")
    # Not a file here: a benchmark name stays a name.
    assert default_config("ETTh1", "itransformer_mha")["extends"].endswith("itransformer_mha/etth1.yaml")


def test_a_model_fitted_on_a_csv_reads_that_csv_back_without_repeating_its_layout(data_root, tmp_path, capsys):
    """The time column and date format given at fit time are saved with the model."""
    frame = pd.read_csv(data_root / "ETTh1.csv.gz").iloc[:900]
    stamps = pd.to_datetime(frame.pop("date"))
    frame.insert(0, "when", stamps.dt.strftime("%d/%m/%Y %H:%M"))
    frame.to_csv(tmp_path / "mine.csv", index=False)
    out = tmp_path / "run"
    run_json(capsys, ["fit", "--data", str(tmp_path / "mine.csv"), "--model", "itransformer_mha", "--horizon", "24",
                      "--time-col", "when", "--date-format", "%d/%m/%Y %H:%M", *TINY, *SHORT,
                      "--out", str(out), "--no-plot", "--json"])
    summary = run_json(capsys, ["predict", "--model", str(out), "--input", str(tmp_path / "mine.csv"),
                                "--output", str(tmp_path / "forecast.csv"), "--json"])
    forecast = pd.read_csv(tmp_path / "forecast.csv")
    assert list(forecast.columns) == list(frame.columns)  # its time column's name, its variate order
    assert len(forecast) == 24 and pd.Timestamp(forecast["when"].iloc[0]) == stamps.iloc[-1] + pd.Timedelta(hours=1)
    assert summary["output"] == str(tmp_path / "forecast.csv")


def test_val_and_test_size_flags_set_the_tails_of_the_split(tmp_path, capsys):
    from damcha_ts.training import RunConfig

    series = pd.DataFrame({"date": pd.date_range("2024-01-01", periods=400, freq="h"),
                           "a": range(400), "b": [v % 7 for v in range(400)]})
    data = tmp_path / "series.csv"
    series.to_csv(data, index=False)
    out = tmp_path / "run"
    result = run_json(capsys, ["fit", "--data", str(data), "--model", "itransformer_mha", "--horizon", "4",
                               "--lookback", "16", *TINY, *SHORT, "--val-size", "60", "--test-size", "0.25",
                               "--no-plot", "--out", str(out), "--json"])
    saved = RunConfig.load(out / "config.yaml")
    assert (saved.data.protocol.val_size, saved.data.protocol.test_size) == (60, 0.25)
    # 100 test rows (a quarter of 400) give 100 - 4 + 1 windows, the lookback taken from before them.
    assert result["test_windows"] == 100 - 4 + 1
