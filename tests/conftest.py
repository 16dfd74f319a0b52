"""Session-wide test setup and the fixtures every test area uses.

Without a GPU the Triton kernels run in triton's CPU interpreter. TRITON_INTERPRET must be set
before any kernel is first decorated, and another test module may trigger that before the kernel
tests run, so it is set here, once, at the start of the session.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Every test uses tiny tensors: one torch thread is faster than two and immune to a busy CPU.

    Module-scoped, so that it is in force before module-scoped fixtures train and predict: forecasts
    compared for equality must come from the same thread count (summation order).
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def data_root() -> Path:
    """The folder of the real benchmark CSVs; tests fail (never skip) when it is not configured."""
    root = os.environ.get("DAMCHA_TS_DATA")
    if not root or not Path(root).is_dir():
        pytest.fail("set DAMCHA_TS_DATA to the directory of the shared benchmark CSVs (../shared/data)")
    return Path(root)
