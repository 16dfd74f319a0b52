"""What every forecasting model offers on top of ``forward``: config, name, optimizer groups, maps."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from damcha_ts.errors import ConfigError
from damcha_ts.models.attention import AttentionConfig, AttentionRecord, DamchaOptions
from damcha_ts.models.metric_generator import MetricGenerator, StaticMetric
from damcha_ts.models.validation import check_dropout, check_heads, check_positive_ints


@dataclass(kw_only=True)
class EncoderModelConfig(DamchaOptions):
    """The hyperparameters every encoder forecaster shares (TSLib run.py defaults), checked once.

    Subclasses add their own fields and the attention switch; ``attention_config(kind)`` gives the
    per-layer attention settings (heads, dropout and the DAMCHA options) for either attention kind.
    """

    seq_len: int = 96
    pred_len: int = 96
    d_model: int = 512
    n_heads: int = 8
    e_layers: int = 2
    d_ff: int = 2048
    dropout: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive_ints(self, ("seq_len", "pred_len", "d_model", "n_heads", "e_layers", "d_ff"))
        check_dropout(self.dropout)
        check_heads(self.d_model, self.n_heads)

    def attention_config(self, kind: str) -> AttentionConfig:
        return AttentionConfig(kind=kind, n_heads=self.n_heads, dropout=self.dropout, **self.damcha_options())


def count_parameters(model: nn.Module) -> int:
    """Number of trainable scalars; a module shared by several layers is counted once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


class ForecastModel(nn.Module):
    """Base of the forecasting models: ``forward(x [B, L, N], x_mark [B, L, M] | None) -> [B, pred_len, N]``.

    Subclasses set ``self.config`` (their dataclass) and implement ``_forecast``.
    """

    config: object

    @property
    def name(self) -> str:
        """Registry name; ``dataclasses.asdict(model.config) | {"name": model.name}`` rebuilds the model."""
        raise NotImplementedError

    def _forecast(
        self, x: Tensor, x_mark: Tensor | None, need_weights: bool
    ) -> tuple[Tensor, dict[str, list[AttentionRecord]]]:
        raise NotImplementedError

    def _check_input(self, x: Tensor) -> None:
        if x.dim() != 3 or x.shape[1] != self.config.seq_len:
            raise ConfigError(
                f"input x has shape {tuple(x.shape)}; "
                f"expected [batch, seq_len={self.config.seq_len}, variates]"
            )

    def forward(self, x: Tensor, x_mark: Tensor | None = None) -> Tensor:
        """x [B, L, N], x_mark [B, L, M] or None -> forecast [B, pred_len, N] (any N)."""
        self._check_input(x)
        return self._forecast(x, x_mark, need_weights=False)[0]

    def attention_maps(self, x: Tensor, x_mark: Tensor | None = None) -> dict[str, list[AttentionRecord]]:
        """Per encoder, per layer: attention weights and (DAMCHA) head metrics of one forward pass.

        Weights come from the explicit path, so this is slower than ``forward``; call it in eval mode
        for maps without dropout.
        """
        self._check_input(x)
        return self._forecast(x, x_mark, need_weights=True)[1]

    def parameter_groups(
        self, learning_rate: float, weight_decay: float = 0.0, compact_lr_scale: float | None = None
    ) -> list[dict]:
        """torch.optim parameter groups: ``{"params", "lr", "weight_decay", "name", "tied_copies"}``.

        A ``"compact"`` DAMCHA parameter stands for H tied rows of the full model, so it gets learning
        rate x H and weight decay / H (damcha.md §10 (b)); with Adam/AdamW (decoupled decay) the model
        then trains exactly as the full one. A schedule must therefore multiply each group's own rate
        (LambdaLR, StepLR, ...), never write one absolute rate into every group. ``tied_copies`` (H
        for compact parameters, else 1) lets gradient-norm clipping count them as the full model
        would (:func:`damcha_ts.training.optim.clip_grad_norm_tied`).

        ``compact_lr_scale`` replaces the factor H (learning rate x scale, weight decay / scale): an
        ablation of that multiplier, no longer equivalent to the full model unless it equals H.
        """
        tied_scale: dict[int, float] = {}
        tied_copies: dict[int, int] = {}
        for module in self.modules():
            if isinstance(module, (MetricGenerator, StaticMetric)):
                for param in module.tied_parameters():
                    tied_scale[id(param)] = module.n_heads if compact_lr_scale is None else compact_lr_scale
                    tied_copies[id(param)] = module.n_heads
        if compact_lr_scale is not None:
            if not tied_scale:
                raise ConfigError(
                    f"compact_lr_scale={compact_lr_scale} needs a DAMCHA model with "
                    "parameterization='compact'; this model has no compact generator parameters"
                )
            if not compact_lr_scale > 0:
                raise ConfigError(f"compact_lr_scale={compact_lr_scale}; expected a number > 0")
        groups: dict[str, dict] = {}
        for param in self.parameters():
            if not param.requires_grad:
                continue
            scale = tied_scale.get(id(param))
            name = "default" if scale is None else f"damcha_compact_x{scale:g}"
            scale = 1 if scale is None else scale
            group = groups.setdefault(
                name,
                {"params": [], "lr": learning_rate * scale, "weight_decay": weight_decay / scale,
                 "name": name, "tied_copies": tied_copies.get(id(param), 1)},
            )
            group["params"].append(param)
        return list(groups.values())
