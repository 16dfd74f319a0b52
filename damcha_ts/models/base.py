"""What every forecasting model offers on top of ``forward``: config, name, optimizer groups, maps."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from damcha_ts.data.options import ProtocolOptions
from damcha_ts.errors import ConfigError
from damcha_ts.models.attention_config import AttentionConfig, AttentionRecord, DamchaOptions
from damcha_ts.models.metric_generator import GatedMetric, MetricGenerator, StaticMetric
from damcha_ts.models.validation import check_counts, check_dropout, check_heads, check_lr_scale, check_positive_ints


@dataclass(kw_only=True)
class EncoderModelConfig(DamchaOptions):
    """The hyperparameters every encoder forecaster shares (TSLib run.py defaults), checked once.

    Subclasses add their own fields and the attention switch; ``attention_config(kind)`` gives the
    per-layer attention settings (heads, dropout and the DAMCHA options) for either attention kind.
    """

    seq_len: int = ProtocolOptions.seq_len  # the lookback and horizon defaults are the protocol's
    pred_len: int = ProtocolOptions.pred_len
    d_model: int = 512
    n_heads: int = 8
    e_layers: int = 2
    d_ff: int = 2048
    dropout: float = 0.1
    # How many covariates of each kind the model reads (see Covariates); 0: none. Added in run-config
    # schema 2, so a config without covariates resolves and hashes as before.
    past_covariates: int = field(default=0, metadata={"since": 2})
    future_covariates: int = field(default=0, metadata={"since": 2})
    static_covariates: int = field(default=0, metadata={"since": 2})

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive_ints(self, ("seq_len", "pred_len", "d_model", "n_heads", "e_layers", "d_ff"))
        check_dropout(self.dropout)
        check_heads(self.d_model, self.n_heads)
        check_counts(self, COVARIATE_KINDS)

    def attention_config(self, kind: str) -> AttentionConfig:
        return AttentionConfig(kind=kind, n_heads=self.n_heads, dropout=self.dropout, **self.damcha_options())


#: The covariate kinds, each a config field ``<kind>_covariates`` and a field of :class:`Covariates`.
COVARIATE_KINDS = ("past", "future", "static")


@dataclass(frozen=True)
class Covariates:
    """Inputs a model reads but never forecasts or scores, already scaled by the data layer.

    ``past`` [B, L, P]: observed up to the forecast origin (the lookback only). ``future``
    [B, L + H, F]: known in advance (calendars, prices, promotions), over the lookback and the
    horizon, so the model sees the covariate's future. ``static`` [B, S]: constant per series.
    """

    past: Tensor | None = None
    future: Tensor | None = None
    static: Tensor | None = None

    @classmethod
    def from_batch(cls, batch: dict, device=None) -> Covariates | None:
        """The ``<kind>_covariates`` entries of a window batch (``data/windows.py``), moved to
        ``device`` when given; None when the batch has none."""
        given = {kind: batch[f"{kind}_covariates"] for kind in COVARIATE_KINDS if f"{kind}_covariates" in batch}
        if device is not None:
            given = {kind: value.to(device) for kind, value in given.items()}
        return cls(**given) if given else None


def count_parameters(model: nn.Module) -> int:
    """Number of trainable scalars; a module shared by several layers is counted once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def model_device(model: nn.Module) -> torch.device:
    """Where ``model``'s tensors are (a baseline without any: the CPU)."""
    tensor = next(itertools.chain(model.parameters(), model.buffers()), None)
    return torch.device("cpu") if tensor is None else tensor.device


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
        self, x: Tensor, x_mark: Tensor | None, need_weights: bool, covariates: Covariates | None = None
    ) -> tuple[Tensor, dict[str, list[AttentionRecord]]]:
        raise NotImplementedError

    def _check_input(self, x: Tensor) -> None:
        if x.dim() != 3 or x.shape[1] != self.config.seq_len:
            raise ConfigError(
                f"input x has shape {tuple(x.shape)}; "
                f"expected [batch, seq_len={self.config.seq_len}, variates]"
            )

    def _check_covariates(self, x: Tensor, covariates: Covariates | None) -> None:
        """Each covariate kind the config counts is given with its shape; no other kind is."""
        batch, config = x.shape[0], self.config
        shapes = {"past": (batch, config.seq_len, config.past_covariates),
                  "future": (batch, config.seq_len + config.pred_len, config.future_covariates),
                  "static": (batch, config.static_covariates)}
        for kind, shape in shapes.items():
            given = getattr(covariates, kind, None) if covariates is not None else None
            if shape[-1] == 0 and given is not None:
                raise ConfigError(f"{kind} covariates were given, but this model was built without them "
                                  f"({kind}_covariates=0)")
            if shape[-1] > 0 and (given is None or tuple(given.shape) != shape):
                found = "none" if given is None else f"shape {tuple(given.shape)}"
                raise ConfigError(f"this model reads {kind} covariates of shape {list(shape)}; got {found}")

    def forward(self, x: Tensor, x_mark: Tensor | None = None, covariates: Covariates | None = None) -> Tensor:
        """x [B, L, N], x_mark [B, L, M] or None, covariates (when the config counts any) ->
        forecast [B, pred_len, N] (any N; covariates are read, never forecast)."""
        self._check_input(x)
        self._check_covariates(x, covariates)
        return self._forecast(x, x_mark, need_weights=False, covariates=covariates)[0]

    def attention_maps(
        self, x: Tensor, x_mark: Tensor | None = None, covariates: Covariates | None = None
    ) -> dict[str, list[AttentionRecord]]:
        """Per encoder, per layer: attention weights and (DAMCHA) head metrics of one forward pass.

        Weights come from the explicit path, so this is slower than ``forward``; call it in eval mode
        for maps without dropout.
        """
        self._check_input(x)
        self._check_covariates(x, covariates)
        return self._forecast(x, x_mark, need_weights=True, covariates=covariates)[1]

    def parameter_groups(
        self, learning_rate: float, weight_decay: float = 0.0, compact_lr_scale: float | None = None,
        gate_lr_scale: float | None = None,
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

        ``gate_lr_scale`` trains the gates of a gated metric (``metric_gate``) at learning rate x scale:
        Adam moves a parameter by about its rate per step, so under the halving schedule a gate at the
        base rate stays within a few hundredths of 0, i.e. the model stays the static metric.
        """
        tied_scale: dict[int, float] = {}
        tied_copies: dict[int, int] = {}
        for module in self.modules():
            if isinstance(module, (MetricGenerator, StaticMetric)):
                for param in module.tied_parameters():
                    tied_scale[id(param)] = module.n_heads if compact_lr_scale is None else compact_lr_scale
                    tied_copies[id(param)] = module.n_heads
        check_lr_scale("compact_lr_scale", compact_lr_scale, bool(tied_scale),
                       "parameterization='compact'; this model has no compact generator parameters")
        gates = {id(m.gate) for m in self.modules() if isinstance(m, GatedMetric)}
        check_lr_scale("gate_lr_scale", gate_lr_scale, bool(gates), "metric_gate=True; this model has no gates")
        if gate_lr_scale is not None:
            tied_scale.update({gate: gate_lr_scale for gate in gates})
        groups: dict[str, dict] = {}
        for param in self.parameters():
            if not param.requires_grad:
                continue
            scale = tied_scale.get(id(param))
            if id(param) in gates and scale is not None:  # a faster rate only, the decay as set
                name, decay = f"metric_gate_x{scale:g}", weight_decay
            else:
                name = "default" if scale is None else f"damcha_compact_x{scale:g}"
                decay = weight_decay / (1 if scale is None else scale)
            scale = 1 if scale is None else scale
            group = groups.setdefault(
                name,
                {"params": [], "lr": learning_rate * scale, "weight_decay": decay,
                 "name": name, "tied_copies": tied_copies.get(id(param), 1)},
            )
            group["params"].append(param)
        return list(groups.values())

