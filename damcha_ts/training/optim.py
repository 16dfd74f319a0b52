"""The optimiser and the learning-rate schedules every training surface uses.

- ``adamw(groups, lr)``: Adam with decoupled weight decay (AdamW) over ``model.parameter_groups``, with
  the multi-tensor ("foreach") update. Without weight decay (every shipped config) it is Adam, the
  references' optimiser. With weight decay, decoupled decay is what keeps compact DAMCHA's
  "weight decay / H" rule exact (damcha.md §10); Adam's L2-in-the-gradient would not. PyTorch picks
  foreach only for CUDA tensors and loops tensor by tensor on CPU; foreach gives bit-identical
  parameters there (tests/training/test_optim.py) and was measured ~30 % faster per
  DAMCHA-iTransformer training step on ETTh1 (its 4M-parameter generator layer dominates the update).
- Schedules are per-epoch factors of each parameter group's own rate. TSLib's ``adjust_learning_rate``
  writes one absolute rate into every group, which would erase the H-times larger rate that DAMCHA's
  compact generator layer needs (damcha.md §10). A LambdaLR factor scales every group by the same
  number, so the ratios between groups hold at every step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from damcha_ts.errors import ConfigError


def adamw(groups: Sequence[dict], lr: float) -> torch.optim.AdamW:
    """AdamW (no weight decay unless a group sets it) over parameter groups, foreach update on any device."""
    return torch.optim.AdamW(groups, lr=lr, weight_decay=0.0, foreach=True)


def lr_factor(schedule: str, max_epochs: int) -> Callable[[int], float]:
    """The factor applied during epoch ``epoch`` (0-based) for a schedule name.

    - ``"type1"``: TSLib's ``lradj='type1'``. After finishing epoch e (1-based) the rate becomes
      lr0 * 0.5**(e - 1), so epochs 0 and 1 (0-based) run at lr0, epoch 2 at lr0/2, epoch 3 at lr0/4.
    - ``"constant"``: 1.
    - ``"cosine"``: half a cosine from 1 at epoch 0 towards 0 at ``max_epochs``.
    """
    if schedule == "type1":
        return lambda epoch: 0.5 ** max(epoch - 1, 0)
    if schedule == "constant":
        return lambda epoch: 1.0
    if schedule == "cosine":
        return lambda epoch: 0.5 * (1.0 + math.cos(math.pi * min(epoch, max_epochs) / max_epochs))
    raise ConfigError(f"unknown learning-rate schedule {schedule!r}; use type1, constant or cosine")
