"""Run folders and their checkpoints: a resume reads only its own folder, never half a file.

Matrix rows: what was done to a finished ``damcha-ts fit`` run folder → what ``fit --resume`` says.
Beside it, a real "disk full" (a file-size limit) while a checkpoint is written.
"""

from __future__ import annotations

import json
import math
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from matrix import Case, check_case, copy_run, fit_argv, hourly_frame, run_cli, write_csv


def _resume(run: Path, data: Path | None = None) -> list[str]:
    """``fit --resume`` of ``run`` with the arguments it was trained with (same data file, same config)."""
    return fit_argv(data or run.parent / "series.csv", run, "--resume")


def _fresh_run(folder: Path, name: str = "original") -> Path:
    """A run trained in ``folder`` (its data file beside it), so that a case may change or remove it."""
    folder.mkdir(parents=True, exist_ok=True)
    data = write_csv(hourly_frame(seed=1), folder / "series.csv")
    outcome = run_cli(fit_argv(data, folder / name))
    assert outcome.code == 0, outcome.stderr
    return folder / name


def _metrics(run: Path) -> dict:
    return json.loads((run / "metrics.json").read_text())


def _moved_away(folder: Path, fixtures: dict) -> list[str]:
    original = _fresh_run(folder)
    fixtures["expected"] = _metrics(original)
    moved = folder / "moved"
    shutil.move(original, moved)  # the original folder is gone
    return _resume(moved)


def _copied_and_original_changed(folder: Path, fixtures: dict) -> list[str]:
    original = _fresh_run(folder)
    fixtures["expected"] = _metrics(original)
    copy = copy_run(original, folder, "copy")
    # The original goes on to other weights: a copy must never read them.
    best = torch.load(original / "checkpoints" / "best.ckpt", weights_only=True)
    best["state_dict"] = {k: torch.randn_like(v) if v.is_floating_point() else v for k, v in best["state_dict"].items()}
    torch.save(best, original / "checkpoints" / "best.ckpt")
    return _resume(copy)


def _same_scores_as(name: str, fixtures: dict):
    def after(folder: Path) -> None:
        scores, expected = _metrics(folder / name), fixtures["expected"]
        assert math.isfinite(scores["best_val_loss"]), scores
        for key in ("best_val_loss", "mse", "mae", "best_epoch"):
            assert scores[key] == pytest.approx(expected[key], rel=1e-9, abs=1e-12), key
        saved = json.loads((folder / name / "model" / "forecaster.json").read_text())
        assert math.isfinite(saved["metrics"]["best_val_loss"])

    return after


def _damaged(last: bytes | None = None, best: bytes | None = None, remove_best: bool = False):
    """A copy of the trained run whose last.ckpt / best.ckpt are replaced by these bytes."""

    def make(folder: Path, fixtures: dict) -> list[str]:
        run = copy_run(fixtures["trained_run"], folder)
        for name, content in (("last.ckpt", last), ("best.ckpt", best)):
            if content is not None:
                path = run / "checkpoints" / name
                path.write_bytes(content(path.read_bytes()) if callable(content) else content)
        if remove_best:
            (run / "checkpoints" / "best.ckpt").unlink()
        return _resume(run, fixtures["trained_run"].parent / "series.csv")

    return make


class _TouchesAFile:
    """A pickle that, when loaded without weights_only, creates a file: the code-execution probe."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def _malicious(folder: Path) -> bytes:
    payload = {"epoch": 0, "state_dict": {}, "callbacks": {}, "x": _TouchesAFile(folder / "pwned")}
    return pickle.dumps(payload)


def _malicious_both(folder: Path, fixtures: dict) -> list[str]:
    content = _malicious(folder)
    return _damaged(last=content, best=content)(folder, fixtures)


def _malicious_last(folder: Path, fixtures: dict) -> list[str]:
    return _damaged(last=_malicious(folder))(folder, fixtures)


def _nothing_ran(folder: Path) -> None:
    assert not (folder / "pwned").exists(), "a checkpoint's pickle ran code"


def _checkpoints_kept(folder: Path) -> None:
    # A refused resume deletes nothing: the user decides what to do with the files.
    assert (folder / "run" / "checkpoints" / "last.ckpt").is_file()
    _nothing_ran(folder)


def _half(content: bytes) -> bytes:
    return content[: len(content) // 2]


CASES = [
    Case("moved run folder resumes from its own best.ckpt", _moved_away, 0, "test MSE",
         stream="stdout"),
    Case("copied run folder ignores the original's changed best.ckpt", _copied_and_original_changed, 0,
         "test MSE", stream="stdout"),
    Case("truncated last.ckpt falls back to best.ckpt", _damaged(last=_half), 0, "resuming from"),
    Case("empty last.ckpt falls back to best.ckpt", _damaged(last=b""), 0, "resuming from"),
    Case("malicious last.ckpt falls back to best.ckpt without running it", _malicious_last, 0,
         "weights-only checkpoint", after=_nothing_ran),
    Case("malicious last.ckpt and best.ckpt are refused", _malicious_both, 2, "cannot resume from",
         after=_checkpoints_kept),
    Case("empty last.ckpt and truncated best.ckpt are refused", _damaged(last=b"", best=_half), 2,
         "start the run afresh", after=_checkpoints_kept),
    Case("last.ckpt whose best.ckpt is gone is refused", _damaged(remove_best=True), 2,
         "the best checkpoint it records, best.ckpt, is not in", after=_checkpoints_kept),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_matrix(case, tmp_path, trained_run):
    fixtures = {"trained_run": trained_run}
    if case.make in (_moved_away, _copied_and_original_changed):
        name = "moved" if case.make is _moved_away else "copy"
        case = Case(case.name, case.make, case.exit_code, case.message, _same_scores_as(name, fixtures), case.stream)
    check_case(case, tmp_path, fixtures)


def test_a_checkpoint_write_cut_short_by_a_full_disk_leaves_the_previous_checkpoints(tmp_path):
    """A file-size limit (RLIMIT_FSIZE) makes every checkpoint write fail part-way, as a full disk
    does. The previous ``last.ckpt`` and ``best.ckpt`` must survive whole, and a later resume on a
    disk with room must finish. (Lightning 2.6's writer passes this too; the test keeps the
    guarantee whatever writes the checkpoints.)"""
    data = write_csv(hourly_frame(seed=2), tmp_path / "series.csv")
    run = tmp_path / "run"
    # One epoch first (a Trainer argument, so the run's config, and with it its resume hash, is unchanged).
    assert run_cli(fit_argv(data, run, "--trainer", "max_epochs=1")).code == 0
    size = (run / "checkpoints" / "last.ckpt").stat().st_size
    script = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({size // 2}, {size // 2}))\n"
        "from damcha_ts.cli.main import main\n"
        f"sys.exit(main({[str(a) for a in fit_argv(data, run, '--resume')]!r}))\n"
    )
    full_disk = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert full_disk.returncode == 2, full_disk.stderr[-2000:]
    assert "File too large" in full_disk.stderr and "Traceback" not in full_disk.stderr
    for name in ("last.ckpt", "best.ckpt"):
        state = torch.load(run / "checkpoints" / name, weights_only=True)
        assert state["epoch"] == 0, name
    assert not list((run / "checkpoints").glob(".*.tmp")), "a temporary checkpoint was left behind"
    resumed = run_cli(fit_argv(data, run, "--resume"))
    assert resumed.code == 0, resumed.stderr
    assert _metrics(run)["epochs_run"] == 2
