"""The attention settings and what an attention layer shows on request.

``DamchaOptions`` holds the DAMCHA switches that the model configs share (``models/base.py``);
``AttentionConfig`` is one layer's settings, read by ``attention.build_attention``; ``AttentionRecord``
is what a layer returns when weights are asked for. No torch module is built here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from torch import Tensor

from damcha_ts.errors import ConfigError
from damcha_ts.models.metric_generator import GENERATOR_INITS, PARAMETERIZATIONS
from damcha_ts.models.validation import check_bools, check_choice, check_dropout, check_positive_ints

ATTENTION_KINDS = ("mha", "damcha")
ATTENTION_BACKENDS = ("auto", "math", "sdpa", "triton")


@dataclass(kw_only=True)
class DamchaOptions:
    """The DAMCHA switches shared by AttentionConfig and the model configs.

    generator_hidden: hidden widths of the metric generator MLP (damcha.md §1.3).
    parameterization: "compact" (reduced last layer, trained with lr x H) or "full" (D*D outputs).
    share_generator: one generator per encoder stack, run once on the stack input (§3.1), or one per layer.
    static_metric: the static-metric ablation (§3.3) in place of the generator.
    generator_dropout: dropout inside the generator MLP; None uses the attention dropout, as the
        reference does (§1.3, §8.2 item 8).
    generator_init: "default" (the reference's PyTorch Linear init of the last layer) or "identity"
        (an ablation: zero weight, bias M = I, so every head metric starts at the identity).
    metric_gate: m_i(x) = m0_i + g_i * Delta_i(x), a static metric (identity at init) plus the
        generator's metrics scaled by one learnable gate per head, 0 at init (``GatedMetric``).
    metric_delta_norm: with ``metric_gate``, rescale Delta_i(x) to the identity's Frobenius norm, so
        |g_i| is the adaptive part's size relative to the initial metric.
    metric_rank: rank r of the generator's per-head metrics, U_i(x) V_i^T (compact only; null = full,
        dh = d_model / n_heads); the generator's last layer shrinks by dh / r.
    attn_backend: "auto" | "math" | "sdpa" | "triton" (see the module docstring).
    """

    generator_hidden: tuple[int, ...] = (256, 512)
    parameterization: str = "compact"
    share_generator: bool = True
    static_metric: bool = False
    # Added after the first leaderboard runs (run-config schema 2: left out of a config at their default).
    generator_dropout: float | None = field(default=None, metadata={"since": 2})
    generator_init: str = field(default="default", metadata={"since": 2})
    metric_gate: bool = field(default=False, metadata={"since": 2})
    metric_delta_norm: bool = field(default=False, metadata={"since": 2})
    metric_rank: int | None = field(default=None, metadata={"since": 2})
    attn_backend: str = "auto"

    def __post_init__(self) -> None:
        try:
            if isinstance(self.generator_hidden, (str, bytes)):  # "256" would become widths 2, 5, 6
                raise TypeError
            self.generator_hidden = tuple(int(width) for width in self.generator_hidden)
        except (TypeError, ValueError):
            raise ConfigError(
                f"generator_hidden={self.generator_hidden!r}; expected a sequence of positive widths"
            ) from None
        if any(width < 1 for width in self.generator_hidden):
            raise ConfigError(f"generator_hidden={self.generator_hidden!r}; every width must be >= 1")
        check_choice("parameterization", self.parameterization, PARAMETERIZATIONS)
        check_choice("generator_init", self.generator_init, GENERATOR_INITS)
        check_choice("attn_backend", self.attn_backend, ATTENTION_BACKENDS)
        check_bools(self, ("share_generator", "static_metric", "metric_gate", "metric_delta_norm"))
        if self.static_metric and self.metric_gate:
            raise ConfigError("static_metric=True and metric_gate=True exclude each other: the gated metric "
                              "already holds a static metric, with an input-adaptive part on top")
        if self.metric_delta_norm and not self.metric_gate:
            raise ConfigError("metric_delta_norm=True needs metric_gate=True: it sets the size of the gated "
                              "adaptive part relative to the static metric")
        if self.metric_rank is not None and (isinstance(self.metric_rank, bool) or not isinstance(self.metric_rank, int)
                                             or self.metric_rank < 1):
            raise ConfigError(f"metric_rank={self.metric_rank!r}; expected null (full rank) or an integer >= 1")
        if self.metric_rank is not None and self.static_metric:
            raise ConfigError("metric_rank is the generator's rank; static_metric=True has no generator")
        if self.generator_dropout is not None:
            check_dropout(self.generator_dropout, "generator_dropout")

    def damcha_options(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(DamchaOptions)}


@dataclass(kw_only=True)
class AttentionConfig(DamchaOptions):
    """One attention layer: its kind, heads, dropout on the attention weights, and DAMCHA options."""

    kind: str = "mha"
    n_heads: int = 8
    dropout: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("kind", self.kind, ATTENTION_KINDS)
        check_positive_ints(self, ("n_heads",))
        check_dropout(self.dropout)


@dataclass
class AttentionRecord:
    """What one attention layer shows on request (``need_weights=True``), detached, for plots.

    weights: [B, H, T, T] (after attention dropout, as the reference returns them).
    head_metrics: DAMCHA's m_i, [B, H, dh, dh] ([H, dh, dh] static, [B, T, H, dh, dh] causal); None for MHA.
    full_metric: the cross-head metric M [B, D, D] ([D, D] static, [B, T, D, D] causal), only with
        parameterization "full".
    """

    weights: Tensor
    head_metrics: Tensor | None = None
    full_metric: Tensor | None = None
