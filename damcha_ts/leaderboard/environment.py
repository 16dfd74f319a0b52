"""What a result row records about where it ran: library versions, hardware, and the device plan."""

from __future__ import annotations

import platform
import subprocess
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch

from damcha_ts import __version__
from damcha_ts.training.devices import visible_gpu_ids


def library_versions() -> str:
    """``"python=3.11.9 torch=2.13.0 lightning=2.6.6 damcha_ts=0.1.0"`` (from package metadata, so
    nothing heavy is imported just to name it)."""
    def installed(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "absent"

    commit = source_commit()
    return (
        f"python={platform.python_version()} torch={installed('torch')} "
        f"lightning={installed('lightning')} damcha_ts={__version__}" + (f" commit={commit}" if commit else "")
    )


def source_commit() -> str | None:
    """The git commit of the checkout ``damcha_ts`` runs from (12 hex digits, ``-dirty`` when tracked
    files differ from it), or None outside a checkout: one version string cannot tell two states
    of the code apart."""
    root = Path(__file__).resolve().parents[2]

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    if not (root / ".git").exists():
        return None
    commit = git("rev-parse", "--short=12", "HEAD")
    if not commit:
        return None
    changed = git("status", "--porcelain", "--untracked-files=no")
    return commit + ("-dirty" if changed else "")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def hardware_description() -> str:
    """The device this process trains on: GPU name if CUDA is used, CPU model and thread count."""
    cpu = f"cpu={cpu_model()} threads={torch.get_num_threads()}"
    if torch.cuda.is_available():
        return f"gpu={torch.cuda.get_device_name(0)} {cpu}"
    return cpu


@dataclass(frozen=True)
class DevicePlan:
    """How cells are spread over the machine.

    On CUDA: one worker process per visible GPU (``gpu_ids`` are the values each worker gets as its
    ``CUDA_VISIBLE_DEVICES``); the run configs' ``precision: auto`` then trains in bf16-mixed. On
    CPU: one run at a time using every core.
    """

    gpu_ids: tuple[str, ...]

    @property
    def uses_cuda(self) -> bool:
        return bool(self.gpu_ids)

    def trainer_kwargs(self) -> dict:
        """Device arguments for ``lightning.Trainer``; kept out of the cell's config hash, so a cell
        finished on one kind of device counts as finished on the other."""
        return {"accelerator": "gpu" if self.uses_cuda else "cpu", "devices": 1}


def detect_devices() -> DevicePlan:
    """Every GPU this process may see (honouring an existing CUDA_VISIBLE_DEVICES), or the CPU."""
    if not torch.cuda.is_available():
        return DevicePlan(gpu_ids=())
    return DevicePlan(gpu_ids=visible_gpu_ids(torch.cuda.device_count()))
