"""The saved-model directory and ``damcha-ts predict``: no lost file, no NaN forecast, no traceback.

Matrix rows: a copy of a finished ``damcha-ts fit`` run (its saved model in ``run/model/``) with one
file edited, or a ``--output`` that names a file it must not replace → what ``damcha-ts predict`` /
``evaluate`` says. Every case also checks that no file in its folder changed (nothing written over
the history, the data or the model). Beside the matrix, the same rules through the Python API.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from matrix import Case, check_case, copy_run

MODEL = Path("model")
# The bytes of every file in a case's folder once its make() has run: the command must change none.
_BEFORE: dict[Path, dict[Path, bytes]] = {}


def _files(folder: Path) -> dict[Path, bytes]:
    return {path: path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def _nothing_written(folder: Path) -> None:
    before = _BEFORE.pop(folder)
    after = _files(folder)
    assert after.keys() == before.keys(), f"files added or removed: {sorted(set(after) ^ set(before))}"
    changed = [str(path) for path in before if after[path] != before[path]]
    assert not changed, f"files written over: {changed}"


def _history_csv(folder: Path, fixtures: dict) -> Path:
    """A copy of the CSV the run was trained on, as the history to continue."""
    return Path(shutil.copyfile(fixtures["trained_run"].parent / "series.csv", folder / "history.csv"))


def _case(edit=None, command="predict", extra=None):
    """A copy of the trained run, ``edit(model_dir, folder)`` applied; runs ``command --model RUN``
    with ``extra(folder, fixtures, run)`` arguments."""

    def make(folder: Path, fixtures: dict) -> list[str]:
        run = copy_run(fixtures["trained_run"], folder)
        if edit is not None:
            edit(run / MODEL, folder)
        argv = [command, "--model", run, *(extra(folder, fixtures, run) if extra else [])]
        _BEFORE[folder] = _files(folder)
        return argv

    return make


# ------------------------------------------------------------------ edits of forecaster.json
def _document(model: Path) -> dict:
    return json.loads((model / "forecaster.json").read_text())


def _write_document(model: Path, document) -> None:
    (model / "forecaster.json").write_text(json.dumps(document, indent=2))


def _resealed(model: Path, document: dict) -> None:
    """Write ``document`` with digests that match (weights and content), as a save would have: the
    check that must catch the case is then not the checksum one."""
    document["weights_sha256"] = hashlib.sha256((model / "weights.pt").read_bytes()).hexdigest()
    if "content_sha256" in document:  # a version-2 directory (fbf489e wrote version 1, without it)
        from damcha_ts.training.artifacts import content_digest

        document["content_sha256"] = content_digest(document)
    _write_document(model, document)


def _edit(change):
    """forecaster.json with ``change(document)`` applied (its digests left as they were)."""

    def edit(model: Path, folder: Path) -> None:
        document = _document(model)
        change(document)
        _write_document(model, document)

    return edit


def _as_version_1(document: dict) -> None:
    """forecaster.json as fbf489e wrote it: format_version 1, no digest of itself or the history,
    no calibration section (calibration.npz, unrecorded, is then ignored)."""
    document.pop("content_sha256", None)
    document.pop("history_sha256", None)
    document.pop("calibration", None)
    document["format_version"] = 1


def _set(section: str, key: str, value):
    def change(document: dict) -> None:
        document[section][key] = value

    return change


def _set_item(section: str, key: str, index: int, value):
    def change(document: dict) -> None:
        document[section][key][index] = value

    return change


def _drop(key: str):
    def change(document: dict) -> None:
        del document[key]

    return change


def _text(content: str):
    def edit(model: Path, folder: Path) -> None:
        (model / "forecaster.json").write_text(content)

    return edit


def _version_1_with_scale(value: float):
    def change(document: dict) -> None:
        _as_version_1(document)
        document["data"]["scaler_scale"][0] = value

    return change


def _tampered_mean(document: dict) -> None:
    document["data"]["scaler_mean"][0] += 0.01  # still a valid value: only the digest tells


def _tampered_digest(document: dict) -> None:
    document["content_sha256"] = "0" * 64


def _training_data_copied(model: Path, folder: Path) -> None:
    """The run trained on a copy of the CSV in the case's folder (the shared fixture's file must not
    be the one a broken predict would overwrite)."""
    document = _document(model)
    data = shutil.copyfile(document["data"]["data_config"]["dataset"], folder / "series.csv")
    document["data"]["data_config"]["dataset"] = str(data)
    document["metrics"]["dataset"] = str(data)
    _resealed(model, document)


def _nan_weights(model: Path, folder: Path) -> None:
    """Weights of a training that diverged, saved with digests that match."""
    state = torch.load(model / "weights.pt", weights_only=True)
    torch.save({k: torch.full_like(v, float("nan")) if v.is_floating_point() else v for k, v in state.items()},
               model / "weights.pt")
    _resealed(model, _document(model))


# ------------------------------------------------------------------ edits of history.npz
def _history_bytes(content: bytes):
    def edit(model: Path, folder: Path) -> None:
        (model / "history.npz").write_bytes(content)

    return edit


def _history_arrays(change):
    """history.npz rewritten with ``change(arrays)`` applied to its arrays."""

    def edit(model: Path, folder: Path) -> None:
        with np.load(model / "history.npz") as stored:
            arrays = dict(stored)
        change(arrays)
        with open(model / "history.npz", "wb") as handle:
            np.savez(handle, **arrays)

    return edit


def _without_values(arrays: dict) -> None:
    del arrays["values"]


def _values_as_text(arrays: dict) -> None:
    arrays["values"] = arrays["values"].astype(str)


def _values_nudged(arrays: dict) -> None:
    arrays["values"] = arrays["values"] + 0.01  # still a valid history: only the digest tells


# ------------------------------------------------------------------ --output arguments
def _output_is_input(folder: Path, fixtures: dict, run: Path) -> list[str]:
    history = _history_csv(folder, fixtures)
    return ["--input", history, "--output", history]


def _output_through_parent(folder: Path, fixtures: dict, run: Path) -> list[str]:
    history = _history_csv(folder, fixtures)
    (folder / "sub").mkdir()
    return ["--input", history, "--output", folder / "sub" / ".." / "history.csv"]


def _output_through_symlinked_folder(folder: Path, fixtures: dict, run: Path) -> list[str]:
    history = _history_csv(folder, fixtures)
    (folder / "link").symlink_to(folder, target_is_directory=True)
    return ["--input", history, "--output", folder / "link" / "history.csv"]


def _output_hard_linked_to_input(folder: Path, fixtures: dict, run: Path) -> list[str]:
    history = _history_csv(folder, fixtures)
    os.link(history, folder / "forecast.csv")
    return ["--input", history, "--output", folder / "forecast.csv"]


def _output_over(*parts: str):
    def extra(folder: Path, fixtures: dict, run: Path) -> list[str]:
        return ["--input", _history_csv(folder, fixtures), "--output", run.joinpath(*parts)]

    return extra


def _output_over_training_data(folder: Path, fixtures: dict, run: Path) -> list[str]:
    return ["--output", folder / "series.csv"]


def _with_covariate(name: str, scale: float = 1.0):
    """One past covariate ``name`` with a scaler (mean 0, ``scale``)."""

    def change(document: dict) -> None:
        document["data"].update(past_covariates=[name], covariate_mean=[0.0], covariate_scale=[scale])

    return change


def _with_entities(scalers=None, scale=None):
    """Two entities 'a' and 'b' with the saved scaler each (``scalers`` replaces them; ``scale``
    replaces b's scaler_scale)."""

    def change(document: dict) -> None:
        data = document["data"]
        own = {"scaler_mean": data["scaler_mean"], "scaler_scale": data["scaler_scale"], "covariate_mean": [],
               "covariate_scale": [], "static": []}
        given = {"a": own, "b": {**own, **({"scaler_scale": scale} if scale is not None else {})}}
        data.update(entity_col="store", entities=["a", "b"], entity_scalers=given if scalers is None else scalers)

    return change


# Messages the user sees: the file, the field and what is wrong with it.
SAME_AS_INPUT = "is the same file as --input"
NOT_A_NPZ = "history.npz: not a readable NumPy .npz archive"

CASES = [
    # --output must never replace the history, the training data or the model.
    Case("output is the input", _case(extra=_output_is_input), 2, SAME_AS_INPUT, _nothing_written),
    Case("output is the input through sub/..", _case(extra=_output_through_parent), 2, SAME_AS_INPUT,
         _nothing_written),
    Case("output is the input through a symlinked folder", _case(extra=_output_through_symlinked_folder), 2,
         SAME_AS_INPUT, _nothing_written),
    Case("output is a hard link to the input", _case(extra=_output_hard_linked_to_input), 2, SAME_AS_INPUT,
         _nothing_written),
    Case("output over model/forecaster.json", _case(extra=_output_over("model", "forecaster.json")), 2,
         "model/forecaster.json, a file of --model", _nothing_written),
    Case("output over model/weights.pt", _case(extra=_output_over("model", "weights.pt")), 2,
         "model/weights.pt, a file of --model", _nothing_written),
    Case("output over the run folder's metrics.json", _case(extra=_output_over("metrics.json")), 2,
         "metrics.json, a file of --model", _nothing_written),
    Case("output over the training data", _case(_training_data_copied, extra=_output_over_training_data), 2,
         "series.csv, the data --model", _nothing_written),
    # The scaler: a forecast is model output * scale + mean.
    Case("scale 0", _case(_edit(_set_item("data", "scaler_scale", 1, 0.0))), 2,
         "forecaster.json: data.scaler_scale of column 'v1' is 0.0; a scale must be > 0", _nothing_written),
    Case("mean NaN", _case(_edit(_set_item("data", "scaler_mean", 0, float("nan")))), 2,
         "forecaster.json: data.scaler_mean of column 'v0' is nan; expected a finite number", _nothing_written),
    Case("scale of length 1", _case(_edit(_set("data", "scaler_scale", [1.0]))), 2,
         "forecaster.json: data.scaler_scale has length 1; expected a list of 3 numbers", _nothing_written),
    Case("version-1 forecaster.json with a negative scale", _case(_edit(_version_1_with_scale(-1.0))), 2,
         "data.scaler_scale of column 'v0' is -1.0; a scale must be > 0", _nothing_written),
    Case("freq not a pandas frequency", _case(_edit(_set("data", "freq", "fortnightly"))), 2,
         "forecaster.json: data.freq='fortnightly' is not a pandas frequency string", _nothing_written),
    Case("a column named twice", _case(_edit(_set("data", "columns", ["v0", "v0", "v2"]))), 2,
         "forecaster.json: data.columns names ['v0'] more than once", _nothing_written),
    # The covariate and entity fields of issue 20: names, their scalers, the model's counts.
    Case("covariates the model was not built with", _case(_edit(_set("data", "past_covariates", ["temp"]))), 2,
         "forecaster.json: data.covariate_mean has length 0; expected a list of 1 numbers", _nothing_written),
    Case("a covariate that is also a column", _case(_edit(_with_covariate("v0"))), 2,
         "forecaster.json: data names ['v0'] twice among the columns and covariates", _nothing_written),
    Case("a covariate scale of 0", _case(_edit(_with_covariate("temp", scale=0.0))), 2,
         "data.covariate_scale of column 'temp' is 0.0; a scale must be > 0", _nothing_written),
    Case("covariate names not text", _case(_edit(_set("data", "future_covariates", [1, 2]))), 2,
         "forecaster.json: data.future_covariates=[1, 2] is not a list of column names", _nothing_written),
    Case("a covariate count the model lacks", _case(_edit(_with_covariate("temp"))), 2,
         "forecaster.json: model.past_covariates=0 but data.past_covariates lists 1", _nothing_written),
    Case("entities without their column", _case(_edit(_set("data", "entities", ["a", "b"]))), 2,
         "forecaster.json: data.entity_col=None: a model of 2 entities needs the name of their column",
         _nothing_written),
    Case("entities without their scalers", _case(_edit(_with_entities(scalers={}))), 2,
         "forecaster.json: data.entity_scalers must hold one scaler for each of the entities ['a', 'b']",
         _nothing_written),
    Case("an entity scaler of the wrong length", _case(_edit(_with_entities(scale=[1.0]))), 2,
         "data.entity_scalers['b'].scaler_scale has length 1; expected a list of 3 numbers", _nothing_written),
    Case("entity scalers not an object", _case(_edit(_with_entities(scalers=[1, 2]))), 2,
         "data.entity_scalers must hold one scaler for each of the entities", _nothing_written),
    # A malformed forecaster.json.
    Case("forecaster.json is {}", _case(_text("{}")), 2,
         "forecaster.json: format None is not 'damcha_ts.forecaster'", _nothing_written),
    Case("forecaster.json is []", _case(_text("[]")), 2,
         "forecaster.json: holds a JSON array, not the object damcha_ts writes", _nothing_written),
    Case("forecaster.json without data", _case(_edit(_drop("data"))), 2,
         "forecaster.json: the document lacks the keys ['data']", _nothing_written),
    Case("forecaster.json data is {columns: 5}", _case(_edit(lambda d: d.update(data={"columns": 5}))), 2,
         "forecaster.json: data lacks the keys ['freq', 'features'", _nothing_written),
    Case("forecaster.json data.columns is 5", _case(_edit(_set("data", "columns", 5))), 2,
         "forecaster.json: data.columns=5 is not a list of column names", _nothing_written),
    Case("model config with an unknown key", _case(_edit(_set("model", "d_modle", 16))), 2,
         "forecaster.json: model section: unknown key 'd_modle'", _nothing_written),
    # A forecaster.json changed after saving, its values still valid: the manifest catches it.
    Case("forecaster.json scaler mean changed", _case(_edit(_tampered_mean)), 2,
         "recorded as content_sha256 in forecaster.json; the file was modified", _nothing_written),
    Case("forecaster.json digest tampered", _case(_edit(_tampered_digest)), 2,
         f"differs from {'0' * 64} recorded as content_sha256", _nothing_written),
    # A malformed or changed history.npz.
    Case("history.npz is random bytes", _case(_history_bytes(bytes(range(256)) * 8)), 2, NOT_A_NPZ,
         _nothing_written),
    Case("history.npz is empty", _case(_history_bytes(b"")), 2, NOT_A_NPZ, _nothing_written),
    Case("history.npz without values", _case(_history_arrays(_without_values)), 2,
         "history.npz: the archive lacks the keys ['values']", _nothing_written),
    Case("history.npz values are text", _case(_history_arrays(_values_as_text)), 2,
         "expected floats, int64 nanoseconds and one string", _nothing_written),
    Case("history.npz values changed", _case(_history_arrays(_values_nudged)), 2,
         "recorded as history_sha256 in forecaster.json", _nothing_written),
    # Weights of a diverged training, digests intact: never a NaN forecast or score with exit 0.
    Case("NaN weights", _case(_nan_weights), 2,
         "the forecast holds NaN/inf for variates v0, v1, v2 at steps 1, 2, 3, 4 (of 4): the model's weights hold "
         "NaN/inf", _nothing_written),
    Case("evaluate with NaN weights", _case(_nan_weights, "evaluate"), 2,
         "test MSE/MAE on series are not finite", _nothing_written),
    Case("evaluate on forecaster.json []", _case(_text("[]"), "evaluate"), 2,
         "forecaster.json: holds a JSON array", _nothing_written),
    Case("evaluate on forecaster.json data.columns 5", _case(_edit(_set("data", "columns", 5)), "evaluate"), 2,
         "forecaster.json: data.columns=5 is not a list", _nothing_written),
    Case("evaluate on an empty history.npz", _case(_history_bytes(b""), "evaluate"), 2, NOT_A_NPZ,
         _nothing_written),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_matrix(case, tmp_path, trained_run):
    check_case(case, tmp_path, {"trained_run": trained_run})


# ------------------------------------------------------------------ the Python API
@pytest.fixture
def model_copy(trained_run, tmp_path) -> Path:
    return copy_run(trained_run, tmp_path) / MODEL


@pytest.mark.parametrize(
    ("edit", "error", "message"),
    [
        (_edit(_set_item("data", "scaler_scale", 0, 0.0)), "ConfigError", r"forecaster\.json: data\.scaler_scale"),
        (_text('{"format": "damcha_ts.forecaster", "format_version": 2}'), "ConfigError",
         r"forecaster\.json: the document lacks the keys \['model', 'training', 'data'"),
        (_edit(_tampered_mean), "ChecksumError", r"forecaster\.json: the sha256 of its content [0-9a-f]{64} differs"),
        (_history_bytes(b"not an archive"), "DataError", r"history\.npz: not a readable"),
        (_history_arrays(_values_nudged), "ChecksumError",
         r"history\.npz: sha256 [0-9a-f]{64} differs from [0-9a-f]{64}"),
    ],
    ids=["scale 0", "sections missing", "tampered content", "history not an npz", "tampered history"],
)
def test_load_names_the_file_and_what_is_wrong(model_copy, edit, error, message):
    from damcha_ts import Forecaster, errors

    edit(model_copy, model_copy.parent)
    with pytest.raises(getattr(errors, error), match=message):
        Forecaster.load(model_copy)


def test_save_and_load_give_identical_forecasts_and_a_full_manifest(trained_run, tmp_path):
    from damcha_ts import Forecaster

    loaded = Forecaster.load(trained_run)
    again = Forecaster.load(loaded.save(tmp_path / "saved"))
    np.testing.assert_array_equal(again.predict().to_numpy(), loaded.predict().to_numpy())
    document = _document(tmp_path / "saved")
    assert document["format_version"] == 2
    assert document["history_sha256"] == hashlib.sha256((tmp_path / "saved" / "history.npz").read_bytes()).hexdigest()
    content = {k: v for k, v in document.items() if k != "content_sha256"}
    assert document["content_sha256"] == hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def test_a_version_1_directory_still_loads_and_predicts(trained_run, model_copy):
    from damcha_ts import Forecaster

    _edit(_as_version_1)(model_copy, model_copy.parent)
    assert set(_document(model_copy)) == {"format", "format_version", "model", "training", "data", "weights_sha256",
                                         "metrics"}
    np.testing.assert_array_equal(Forecaster.load(model_copy).predict().to_numpy(),
                                  Forecaster.load(trained_run).predict().to_numpy())


def test_a_history_added_to_a_model_saved_without_one_is_refused(trained_run, tmp_path):
    from damcha_ts import Forecaster
    from damcha_ts.errors import ChecksumError

    forecaster = Forecaster.load(trained_run)
    forecaster.predictor_.history = None
    directory = forecaster.save(tmp_path / "no_history")
    shutil.copyfile(trained_run / MODEL / "history.npz", directory / "history.npz")
    with pytest.raises(ChecksumError, match=r"history_sha256=null"):
        Forecaster.load(directory)


def test_predict_never_returns_a_non_finite_forecast(trained_run):
    from damcha_ts import Forecaster
    from damcha_ts.errors import DataError

    forecaster = Forecaster.load(trained_run)
    forecaster.meta_.scaler_scale = [0.0, 1.0, 1.0]  # past load's checks: the guard at predict time
    scaled_badly = r"the forecast holds NaN/inf .*scaled by the saved scaler"
    with np.errstate(divide="ignore"), pytest.raises(DataError, match=scaled_badly):
        forecaster.predict()
    forecaster = Forecaster.load(trained_run)
    with torch.no_grad():
        next(forecaster.model_.parameters()).fill_(float("inf"))
    with pytest.raises(DataError, match=r"the model's weights hold NaN/inf"):
        forecaster.predict()
