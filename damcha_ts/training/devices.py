"""Which GPUs a process may hand out to its workers, one GPU each.

The leaderboard runner starts one worker per GPU and the tuning launcher pins each worker to one
GPU; both pin through CUDA_VISIBLE_DEVICES and must honour the one they were started under.
"""

from __future__ import annotations

import os
from collections.abc import Mapping


def visible_gpu_ids(count: int, environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The CUDA_VISIBLE_DEVICES names of the ``count`` GPUs torch sees, in torch's order.

    With CUDA_VISIBLE_DEVICES set, its first ``count`` entries (a worker pinned to one of them must
    see that GPU, not torch's renumbered index; set but empty, none); without it, "0" .. "count-1".
    """
    environ = os.environ if environ is None else environ
    if "CUDA_VISIBLE_DEVICES" not in environ:
        return tuple(str(i) for i in range(count))
    # Set but empty hides every GPU, as it does for CUDA itself.
    named = tuple(part.strip() for part in environ["CUDA_VISIBLE_DEVICES"].split(",") if part.strip())
    return named[:count]
