"""The training optimiser: foreach AdamW must train exactly as PyTorch's tensor-by-tensor AdamW."""

from __future__ import annotations

import pytest
import torch

from damcha_ts.models import build_model
from damcha_ts.training.optim import adamw, lr_factor


def _train(name: str, make_optimizer, steps: int = 12, **extra) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = build_model({"name": name, "seq_len": 24, "pred_len": 8, "d_model": 16, "d_ff": 16, "n_heads": 4,
                         "generator_hidden": [8], **extra})
    optimizer = make_optimizer(model.parameter_groups(1e-3, weight_decay=1e-4))
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor("type1", 10))
    data = torch.Generator().manual_seed(1)
    for step in range(steps):
        x, marks, y = torch.randn(4, 24, 5, generator=data), torch.randn(4, 24, 4, generator=data), torch.randn(4, 8, 5, generator=data)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x, marks), y).backward()  # dropout active: same RNG use
        optimizer.step()
        if step % 4 == 3:
            schedule.step()
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("name, extra", [
    ("itransformer_damcha", {}),
    ("itransformer_damcha", {"parameterization": "full", "share_generator": False}),
    ("gateformer_damcha", {}),
    ("itransformer_mha", {}),
])
def test_foreach_adamw_is_bit_identical_to_the_per_tensor_loop(name, extra):
    reference = _train(name, lambda groups: torch.optim.AdamW(groups, lr=1e-3, foreach=False), **extra)
    ours = _train(name, lambda groups: adamw(groups, 1e-3), **extra)
    assert len(ours) == len(reference)
    for ours_param, reference_param in zip(ours, reference):
        assert torch.equal(ours_param, reference_param)
    # The comparison can fail: the training moved the parameters away from their init.
    assert not all(torch.equal(a, b) for a, b in zip(ours, _train(name, lambda g: adamw(g, 1e-3), steps=0, **extra)))


def test_adamw_keeps_the_group_rates_and_uses_foreach():
    model = build_model({"name": "itransformer_damcha", "d_model": 16, "d_ff": 16, "n_heads": 4, "generator_hidden": [8]})
    optimizer = adamw(model.parameter_groups(2e-4), 2e-4)
    assert {g["name"]: g["lr"] for g in optimizer.param_groups} == {"default": 2e-4, "damcha_compact_x4": 8e-4}
    assert optimizer.defaults["foreach"] is True


def test_without_weight_decay_adamw_is_the_references_adam():
    ours = _train("itransformer_damcha", lambda groups: adamw([{**g, "weight_decay": 0.0} for g in groups], 1e-3))
    adam = _train("itransformer_damcha", lambda groups: torch.optim.Adam([{**g, "weight_decay": 0.0} for g in groups], lr=1e-3))
    for ours_param, adam_param in zip(ours, adam):
        assert torch.equal(ours_param, adam_param)
