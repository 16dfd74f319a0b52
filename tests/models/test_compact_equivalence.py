"""damcha.md §10: "compact" trains exactly as "full" with lr x H and AdamW weight decay / H.

Two models side by side in float64 on real ETTh1 windows, dropout 0, same batches; the compact model
starts from the block-column sums of the full model's init. After 5 optimizer steps the forecasts must
agree to 1e-6 relative. Writing one absolute learning rate into every group (TSLib's
adjust_learning_rate) breaks the equivalence, which shows the comparison is sensitive.
"""

from __future__ import annotations

import copy

import pytest
import torch

from damcha_ts.models import build_model
from damcha_ts.training.optim import adamw, clip_grad_norm_tied

H = 4
HYPER = {
    "seq_len": 96, "pred_len": 24, "d_model": 16, "n_heads": H, "e_layers": 2, "d_ff": 16, "dropout": 0.0,
    "generator_hidden": (12,),
}


def windows(series: torch.Tensor, starts: range) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.stack([series[s : s + 96] for s in starts])
    y = torch.stack([series[s + 96 : s + 120] for s in starts])
    return x, y


def compact_copy(full_model, block_row_sum, name, options):
    """A compact model holding exactly the block-column sums of ``full_model``'s generator layers."""
    compact = build_model(name, **(HYPER | options | {"parameterization": "compact"}))
    full_state = full_model.state_dict()
    state = {}
    for key, value in compact.state_dict().items():
        prefix, _, leaf = key.rpartition(".")
        if leaf == "reduced_weight":
            weight = full_state[f"{prefix}.output_weight"]  # [D*D, w]
            width = weight.shape[1]
            d = HYPER["d_model"]
            sums = block_row_sum(weight.view(d, d, width).permute(2, 0, 1), H)  # [w, H, dh, dh]
            state[key] = sums.permute(1, 2, 3, 0).reshape(-1, width)
        elif leaf == "reduced_bias":
            d = HYPER["d_model"]
            state[key] = block_row_sum(full_state[f"{prefix}.output_bias"].view(d, d), H).reshape(-1)
        elif leaf == "reduced_metric":
            state[key] = block_row_sum(full_state[f"{prefix}.metric"], H)
        else:
            state[key] = full_state[key]
    compact.load_state_dict(state)
    return compact


def train_five_steps(model, optimizer_class, weight_decay, batches, one_absolute_rate=False, clip=None):
    """``clip``: None, or (max_norm, clipping function taking (optimizer, max_norm) -> total norm)."""
    optimizer = optimizer_class(model.parameter_groups(3e-3, weight_decay))
    # 'type1'-style halving written as a per-group factor, the form that keeps the ratio H exact
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5**step)
    for step, (x, y) in enumerate(batches):
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        if clip is not None:
            max_norm, clip_function = clip
            assert clip_function(optimizer, max_norm) > 2 * max_norm  # clipping is active at every step
        optimizer.step()
        schedule.step()
        if one_absolute_rate:  # what TSLib's adjust_learning_rate does: one rate for every group
            for group in optimizer.param_groups:
                group["lr"] = 3e-3 * 0.5 ** (step + 1)
    return model


def relative_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max()).item()


@pytest.mark.parametrize(
    "name,options",
    [
        ("itransformer_damcha", {}),
        ("itransformer_damcha", {"share_generator": False}),
        ("itransformer_damcha", {"static_metric": True}),
        ("itransformer_damcha", {"generator_init": "identity"}),
        ("gateformer_damcha", {}),
    ],
)
# torch's Adam without decay; the training optimiser (AdamW, decoupled decay) with decay.
@pytest.mark.parametrize("optimizer_class,weight_decay", [(torch.optim.Adam, 0.0), (lambda groups: adamw(groups, 3e-3), 0.05)])
def test_compact_trains_exactly_like_full(float64, block_row_sum, etth1_series, name, options, optimizer_class, weight_decay):
    batches = [windows(etth1_series, range(40 * k, 40 * k + 32, 4)) for k in range(5)]
    x_eval, _ = windows(etth1_series, range(600, 632, 4))

    torch.manual_seed(0)
    full = build_model(name, **(HYPER | options | {"parameterization": "full"}))
    torch.manual_seed(0)
    same_seed_compact = build_model(name, **(HYPER | options | {"parameterization": "compact"}))
    # From the same seed the two parameterisations start with the same function.
    initial_forecast = full(x_eval)
    assert relative_difference(same_seed_compact(x_eval), initial_forecast) < 1e-12

    compact = compact_copy(full, block_row_sum, name, options)
    broken = compact_copy(full, block_row_sum, name, options)
    groups = {g["name"]: g for g in compact.parameter_groups(3e-3, weight_decay)}
    assert groups[f"damcha_compact_x{H}"]["lr"] == pytest.approx(3e-3 * H)
    assert groups[f"damcha_compact_x{H}"]["weight_decay"] == pytest.approx(weight_decay / H)

    train_five_steps(full, optimizer_class, weight_decay, batches)
    train_five_steps(compact, optimizer_class, weight_decay, batches)
    train_five_steps(broken, optimizer_class, weight_decay, batches, one_absolute_rate=True)

    full_forecast = full.eval()(x_eval)
    assert relative_difference(full_forecast, initial_forecast) > 0.1  # training did move the model
    assert relative_difference(compact.eval()(x_eval), full_forecast) < 1e-6
    assert relative_difference(broken.eval()(x_eval), full_forecast) > 1e-5


def full_model_clipping(optimizer, max_norm):
    return torch.nn.utils.clip_grad_norm_([p for g in optimizer.param_groups for p in g["params"]], max_norm)


def tied_clipping(optimizer, max_norm):
    return clip_grad_norm_tied(optimizer.param_groups, max_norm)


@pytest.mark.parametrize("name,options", [("itransformer_damcha", {}), ("gateformer_damcha", {"static_metric": True})])
def test_compact_clips_exactly_like_full_when_its_tied_rows_count_h_times(
    float64, block_row_sum, etth1_series, name, options
):
    """damcha.md §10: active gradient-norm clipping breaks the equivalence unless the compact
    parameters' squared gradient norms count H times (clip_grad_norm_tied, which training uses)."""
    batches = [windows(etth1_series, range(40 * k, 40 * k + 32, 4)) for k in range(5)]
    x_eval, _ = windows(etth1_series, range(600, 632, 4))
    torch.manual_seed(0)
    full = build_model(name, **(HYPER | options | {"parameterization": "full"}))
    compact = compact_copy(full, block_row_sum, name, options)
    naive = compact_copy(full, block_row_sum, name, options)
    initial_forecast = full(x_eval)
    # SGD, whose step scales with the clipped gradient (Adam's would largely cancel a clip factor);
    # group rates are 3e-3 x 300 (and x H for the compact rows), so five clipped steps move the model.
    sgd = lambda groups: torch.optim.SGD([g | {"lr": g["lr"] * 300} for g in groups], lr=1.0, momentum=0.9)  # noqa: E731
    max_norm = 0.05

    train_five_steps(full, sgd, 0.0, batches, clip=(max_norm, full_model_clipping))
    train_five_steps(compact, sgd, 0.0, batches, clip=(max_norm, tied_clipping))
    train_five_steps(naive, sgd, 0.0, batches, clip=(max_norm, full_model_clipping))  # counts them once

    full_forecast = full.eval()(x_eval)
    assert relative_difference(full_forecast, initial_forecast) > 0.01  # training did move the model
    assert relative_difference(compact.eval()(x_eval), full_forecast) < 1e-12
    assert relative_difference(naive.eval()(x_eval), full_forecast) > 1e-6


def test_training_clips_compact_models_with_the_tied_norm(float64, etth1_series):
    """The Lightning hook (gradient_clip_val) uses the tied norm for compact models only."""
    import lightning as L

    from damcha_ts.training.module import ForecastModule

    x, y = windows(etth1_series, range(0, 32, 4))
    for parameterization, expected in (("compact", tied_clipping), ("full", full_model_clipping)):
        torch.manual_seed(0)
        config = {"name": "itransformer_damcha", **HYPER, "parameterization": parameterization}
        module = ForecastModule(config, {"learning_rate": 3e-3})
        module.trainer = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False)  # its precision plugin clips
        optimizer = module.configure_optimizers()["optimizer"]
        twin = copy.deepcopy(module)
        for model in (module, twin):
            torch.nn.functional.mse_loss(model.model(x), y).backward()
        module.configure_gradient_clipping(optimizer, 1e-3, "norm")
        expected(twin.configure_optimizers()["optimizer"], 1e-3)
        for clipped, reference in zip(module.parameters(), twin.parameters()):
            torch.testing.assert_close(clipped.grad, reference.grad, rtol=1e-12, atol=0)
