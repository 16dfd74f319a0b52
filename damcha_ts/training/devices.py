"""How a process shares its machine among worker processes: which GPUs it may hand out (one each)
and how many CPU threads each worker gets.

The leaderboard runner starts one worker per GPU (or per CPU slot) and the tuning launcher pins each
worker to one GPU; both pin through CUDA_VISIBLE_DEVICES and OMP_NUM_THREADS and must honour the
values they were started under.
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


def threads_per_worker(workers: int, environ: Mapping[str, str] | None = None) -> int:
    """Torch threads for each of ``workers`` processes: OMP_NUM_THREADS when the user set it to a
    positive number (several runners sharing a machine set it, so that their workers do not each
    take every core), else an equal share of the cores, never zero."""
    environ = os.environ if environ is None else environ
    pinned = environ.get("OMP_NUM_THREADS", "").strip()
    if pinned.isdigit() and int(pinned) > 0:
        return int(pinned)
    return max(1, (os.cpu_count() or 1) // workers)
