"""The optimiser and the learning-rate schedules every training surface uses.

- ``adamw(groups, lr)``: Adam with decoupled weight decay (AdamW) over ``model.parameter_groups``, with
  the multi-tensor ("foreach") update. Without weight decay (every shipped config) it is Adam, the
  references' optimiser. With weight decay, decoupled decay is what keeps compact DAMCHA's
  "weight decay / H" rule exact (damcha.md §10); Adam's L2-in-the-gradient would not. PyTorch picks
  foreach only for CUDA tensors and loops tensor by tensor on CPU; foreach gives bit-identical
  parameters there (tests/training/test_optim.py) and was measured ~30 % faster per
  DAMCHA-iTransformer training step on ETTh1 (its 4M-parameter generator layer dominates the update).
- Schedules are per-epoch (``warmup_cosine``: per-step) factors of each parameter group's own rate. TSLib's ``adjust_learning_rate``
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


def clip_grad_norm_tied(param_groups: Sequence[dict], max_norm: float) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` over optimizer groups, with the norm the full model has.

    A compact DAMCHA parameter stands for ``tied_copies`` = H tied rows of the full D*D generator
    layer, each with the same gradient, so the full model's squared gradient norm counts it H times
    (damcha.md §10, "Where it is not exact"). Counting it once would clip compact and full models by
    different factors; counting it H times keeps the two exactly equivalent under active clipping.
    Returns the total norm, as torch does.
    """
    weighted = [(p, group.get("tied_copies", 1)) for group in param_groups for p in group["params"]
                if p.grad is not None]
    if not weighted:
        return torch.zeros(())
    # Summed in at least float32 (bf16/fp16 gradients), in float64 when they are.
    squares = torch.stack([p.grad.detach().to(torch.promote_types(p.grad.dtype, torch.float32)).square().sum()
                           * copies for p, copies in weighted])
    total = squares.sum().sqrt()
    factor = (max_norm / (total + 1e-6)).clamp(max=1.0)  # torch's own clip coefficient
    for p, _ in weighted:
        p.grad.detach().mul_(factor.to(p.grad.dtype))
    return total


class TiedGradientClipping:
    """LightningModule mixin: ``gradient_clip_val`` (algorithm "norm") clips with
    :func:`clip_grad_norm_tied` when the optimizer holds compact DAMCHA parameters, so a compact
    model clips as its full twin would; other models keep Lightning's own clipping."""

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        tied = any(group.get("tied_copies", 1) != 1 for group in optimizer.param_groups)
        if gradient_clip_val and tied and gradient_clip_algorithm in (None, "norm"):
            clip_grad_norm_tied(optimizer.param_groups, gradient_clip_val)
            return
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)


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


def warmup_cosine_factor(total_steps: int, warmup_fraction: float, floor: float) -> Callable[[int], float]:
    """The factor of the rate used by optimiser step ``step`` (0-based) of ``total_steps``.

    The first ``round(warmup_fraction * total_steps)`` = W steps ramp linearly, (s + 1) / W, so that
    the first update already moves; then half a cosine falls from 1 at step W to ``floor`` at the
    last step, ``total_steps - 1``, and stays there (a rate that never dies out, unlike ``type1``).
    """
    if total_steps < 1:
        raise ConfigError(f"warmup_cosine needs at least one optimiser step, got total_steps={total_steps}")
    warmup = round(warmup_fraction * total_steps)
    decay_steps = max(total_steps - 1 - warmup, 1)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min((step - warmup) / decay_steps, 1.0)
        return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor
