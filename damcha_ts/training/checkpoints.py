"""Checkpoints a run folder owns: written atomically, relocatable, and checked before a resume.

- :class:`AtomicCheckpointIO` writes every checkpoint to a temporary file, fsyncs it and renames it
  over the old one, so a kill, a full disk or a power cut leaves the previous checkpoint, never half
  of one. (Lightning 2.6's own writer also moves a temporary file into place, but never fsyncs it,
  and older Lightning versions write in place.)
- :class:`FolderCheckpoint` stores the paths it tracks (``best.ckpt``, ``last.ckpt``) as names
  inside its own folder. Lightning stores absolute paths, so a copied or moved run folder resumed
  from the original's ``best.ckpt`` (and lost its best score when the original was changed or
  gone). A resume only ever reads files of its own folder.
- :func:`resume_point` picks the checkpoint a resume starts from: ``last.ckpt`` when it reads,
  else ``best.ckpt`` (a full training state of an earlier epoch), else a clear refusal.
- :func:`set_log_aside` and :func:`restore_log_history` keep the epochs logged before a resume in
  ``logs/metrics.csv``.
"""

from __future__ import annotations

import csv
import io
import warnings
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.callbacks import ModelCheckpoint

from damcha_ts.errors import ConfigError
from damcha_ts.files import write_atomically

LAST = "last.ckpt"
BEST = "best.ckpt"


class AtomicCheckpointIO(TorchCheckpointIO):
    """``torch.save`` into memory, then :func:`damcha_ts.files.write_atomically` (temp, fsync, rename)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options")
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, buffer.getvalue())


class FolderCheckpoint(ModelCheckpoint):
    """A ModelCheckpoint whose saved state names files relative to its folder (``dirpath``)."""

    _PATH_KEYS = ("best_model_path", "kth_best_model_path", "last_model_path")

    def _generate_state_key(self, **kwargs: Any) -> str:
        # Lightning keys a callback's saved state by its class name: keep ModelCheckpoint's, so runs
        # checkpointed before this class existed resume with their best score.
        return f"ModelCheckpoint{kwargs!r}"

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["dirpath"] = "."  # "this folder", wherever it is when the run resumes
        for key in self._PATH_KEYS:
            state[key] = _name(state.get(key))
        state["best_k_models"] = {_name(path): score for path, score in state.get("best_k_models", {}).items()}
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # Every path, relative (ours) or absolute (a checkpoint written before this class existed),
        # is read as a file name in *this* folder: nothing outside it is ever used.
        self.best_model_score = state_dict.get("best_model_score")
        self.current_score = state_dict.get("current_score", self.current_score)
        self.kth_value = state_dict.get("kth_value", self.kth_value)
        for key in self._PATH_KEYS:
            setattr(self, key, self._here(state_dict.get(key)))
        self.best_k_models = {self._here(path): score for path, score in state_dict.get("best_k_models", {}).items()}

    def _here(self, path: str | None) -> str:
        return str(Path(self.dirpath) / _name(path)) if path else ""


def _name(path: str | None) -> str:
    return Path(path).name if path else ""


def checkpoint_problem(path: Path) -> str | None:
    """Why ``path`` cannot be resumed from (None: it can). Reads it as a weights-only checkpoint and
    checks that the best checkpoint it refers to is a file beside it."""
    try:  # mmap: the structure is read and checked, the weights are not read twice (Lightning reads them)
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except (PermissionError, FileNotFoundError, IsADirectoryError, MemoryError):
        raise  # the machine's problem, not the file's (a truncated file is an OSError EINVAL in torch)
    except Exception as exc:  # noqa: BLE001 - truncated, empty, pickled code, not a checkpoint at all
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return f"it cannot be read as a weights-only checkpoint ({type(exc).__name__}: {first[:200]})"
    if not isinstance(state, dict) or not {"state_dict", "epoch", "callbacks"} <= set(state):
        return "it is not a Lightning training checkpoint (no state_dict/epoch/callbacks)"
    for key, callback_state in state["callbacks"].items():
        if str(key).startswith("ModelCheckpoint") and isinstance(callback_state, dict):
            best = _name(callback_state.get("best_model_path"))
            if best and not (path.parent / best).is_file():
                return f"the best checkpoint it records, {best}, is not in {path.parent}"
    return None


def checkpoint_epoch(path: Path) -> int:
    """The 0-based epoch a readable checkpoint was written at."""
    return int(torch.load(path, map_location="cpu", weights_only=True, mmap=True)["epoch"])


def resume_point(checkpoint_dir: Path) -> Path | None:
    """The checkpoint a resume in ``checkpoint_dir`` starts from (None: there is none yet).

    ``last.ckpt`` when it reads; if it does not, ``best.ckpt`` (Lightning writes the full training
    state there too, so the run goes on from the best epoch) with a warning naming both; if neither
    reads, a ConfigError: the run is never silently restarted, and nothing is deleted.
    """
    last, best = checkpoint_dir / LAST, checkpoint_dir / BEST
    if not last.is_file():
        return None
    problem = checkpoint_problem(last)
    if problem is None:
        return last
    if best.is_file() and checkpoint_problem(best) is None:
        warnings.warn(
            f"{last}: {problem}; resuming from {best} (epoch {checkpoint_epoch(best) + 1}) instead",
            UserWarning, stacklevel=2,
        )
        return best
    best_problem = checkpoint_problem(best) if best.is_file() else "it does not exist"
    raise ConfigError(
        f"cannot resume from {last}: {problem}; and {best}: {best_problem}. Start the run afresh "
        "(damcha-ts fit --overwrite, or resume=False), or put back a good copy of the file"
    )


# Lightning's CSVLogger deletes logs/metrics.csv when a run starts in a folder that has one, so a
# resumed run would lose the epochs before the interruption. Their rows wait in this file (several
# resumes stack up) and are put back in front of the resumed run's rows when it ends.
EARLIER_LOG = "metrics_before_resume.csv"


def _read_log(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _write_log(path: Path, rows: list[dict]) -> None:
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(dict.fromkeys(key for row in rows for key in row)))
    writer.writeheader()
    writer.writerows(rows)
    write_atomically(path, text.getvalue())


def _epoch(row: dict) -> float:
    return float(row["epoch"]) if row.get("epoch") else float("-inf")


def set_log_aside(log_dir: Path) -> None:
    """Before a resumed run starts: logs/metrics.csv's rows join the earlier ones in EARLIER_LOG."""
    current = log_dir / "metrics.csv"
    if current.is_file():
        _write_log(log_dir / EARLIER_LOG, _read_log(log_dir / EARLIER_LOG) + _read_log(current))
        current.unlink()


def restore_log_history(log_dir: Path) -> None:
    """metrics.csv = the earlier rows of epochs before the resumed one, then the resumed run's rows."""
    earlier, current = _read_log(log_dir / EARLIER_LOG), _read_log(log_dir / "metrics.csv")
    if not earlier:
        return
    resumed_from = min((_epoch(row) for row in current if row.get("epoch")), default=float("inf"))
    # Rows of an epoch cut short by the interruption were logged again by the resumed run.
    kept = [row for row in earlier if _epoch(row) < resumed_from]
    _write_log(log_dir / "metrics.csv", kept + current)
    (log_dir / EARLIER_LOG).unlink()
