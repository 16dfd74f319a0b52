"""Session-wide test setup.

Without a GPU the Triton kernels run in triton's CPU interpreter. TRITON_INTERPRET must be set
before any kernel is first decorated, and another test module may trigger that before the kernel
tests run, so it is set here, once, at the start of the session.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
