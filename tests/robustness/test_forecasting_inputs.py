"""The inputs issue 20 added: interval levels, split tail sizes and a saved model's calibration; and
the training.compile / model.metric_gate switches.

Matrix rows: ``damcha-ts predict / evaluate --level``, ``damcha-ts fit --val-size / --test-size`` and a
copy of a finished run whose ``model/calibration.npz`` is missing, empty, not an archive or replaced
→ what the user sees (exit 2, the argument or file named); a refused fit leaves no model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from matrix import Case, check_case, copy_run, fit_case

CALIBRATION = Path("model") / "calibration.npz"


def _predict(*extra: str, edit=None, command: str = "predict"):
    def make(folder: Path, fixtures: dict) -> list[str]:
        run = copy_run(fixtures["trained_run"], folder)
        if edit is not None:
            edit(run / CALIBRATION)
        return [command, "--model", run, *extra]

    return make


def _replace_scores(path: Path) -> None:
    stored = dict(np.load(path))
    np.savez(path, **{**stored, "scores": np.ones_like(stored["scores"])})


def _no_run(folder: Path) -> None:
    assert not (folder / "run" / "model").exists(), "a refused fit must not leave a model"


CASES = [
    Case("level zero", _predict("--level", "0"), 2, "--level holds 0.0; a level is a percentage strictly between 0 and 100"),
    Case("level of a hundred", _predict("--level", "80", "100"), 2, "--level holds 100.0"),
    Case("level not a number", _predict("--level", "eighty"), 2, "argument --level: invalid float value: 'eighty'"),
    Case("negative level to evaluate", _predict("--level", "-3", command="evaluate"), 2, "--level holds -3.0"),
    Case("calibration missing", _predict("--level", "80", edit=Path.unlink), 2,
         "calibration.npz is missing; forecaster.json records its sha256"),
    Case("calibration empty", _predict("--level", "80", edit=lambda p: p.write_bytes(b"")), 2,
         "calibration.npz: not a readable numpy .npz archive; it is not a calibration.npz that damcha_ts wrote (an empty file)"),
    Case("calibration not an archive", _predict("--level", "80", edit=lambda p: p.write_bytes(b"import os")), 2,
         "(not a zip archive)"),
    Case("calibration scores replaced", _predict("--level", "80", edit=_replace_scores), 2,
         "recorded as calibration.sha256 in forecaster.json; the file was modified or replaced"),
    Case("negative validation size", fit_case("--val-size", "-5"), 2,
         "data.val_size must be a number of rows (an integer >= 0) or a fraction of the rows in (0, 1), got -5", _no_run),
    Case("test size over one but not whole", fit_case("--test-size", "2.5"), 2, "data.test_size must be a number of rows", _no_run),
    # The switches this session added (issues 22 and 23): a word that is not a bool is named.
    Case("compile not a bool", fit_case("--set", "training.compile=maybe"), 2,
         "training.compile='maybe' is not a valid bool", _no_run),
    Case("metric gate not a bool", fit_case("--model", "itransformer_damcha", "--set", "model.metric_gate=often"), 2,
         "metric_gate='often'; expected True or False", _no_run),
    Case("metric gate beside the static metric", fit_case("--model", "itransformer_damcha", "--set", "model.metric_gate=true",
                                                          "--set", "model.static_metric=true"), 2,
         "static_metric=True and metric_gate=True exclude each other", _no_run),
    Case("metric rank not a number", fit_case("--model", "itransformer_damcha", "--set", "model.metric_gate=true",
                                              "--set", "model.metric_rank=eight"), 2, "metric_rank", _no_run),
    Case("metric rank above the head width", fit_case("--model", "itransformer_damcha", "--set", "model.metric_rank=4096"), 2,
         "metric_rank=4096; expected null (full rank) or an integer in 1..", _no_run),
    Case("delta norm without the gate", fit_case("--model", "itransformer_damcha", "--set", "model.metric_delta_norm=true"), 2,
         "metric_delta_norm=True needs metric_gate=True", _no_run),
    Case("gate learning rate not positive", fit_case("--model", "itransformer_damcha", "--set", "model.metric_gate=true",
                                                     "--set", "training.gate_lr_scale=-2"), 2,
         "training.gate_lr_scale must be > 0 (or null), got -2.0", _no_run),
    Case("gate learning rate without gates", fit_case("--model", "itransformer_damcha", "--set", "training.gate_lr_scale=20"), 2,
         "gate_lr_scale=20.0 needs a DAMCHA model with metric_gate=True", _no_run),
    Case("tails larger than the data", fit_case("--val-size", "1000"), 2,
         "1000 validation and 80 test rows leave 0 of the 400 rows for training", _no_run),
    Case("validation size not a number", fit_case("--val-size", "ten"), 2, "argument --val-size: invalid float value", _no_run),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_bad_levels_sizes_and_calibrations(case, tmp_path, trained_run):
    check_case(case, tmp_path, {"trained_run": trained_run})


def test_the_trained_run_has_a_calibration_to_damage(trained_run):
    # Otherwise the calibration rows above would pass for the wrong reason.
    assert (trained_run / CALIBRATION).is_file()
