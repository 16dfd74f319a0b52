"""Where DAMCHA's per-head metrics come from (damcha.md §1.2-§1.4, §2, §3.3, §10).

Two sources share one interface, ``source(tokens, key_padding_mask, is_causal) -> head_metrics``:

- :class:`MetricGenerator` -- the data-adaptive f_theta: an MLP on the mean context whose last layer
  produces the per-head metrics m_i = sum_j M_ij (RowSum, paper Eq. 4) directly. The D x D metric M is
  never formed on the training path (the "fused RowSum" of damcha.md §2).
- :class:`StaticMetric` -- the static-metric ablation: one trainable M0, initialised to the identity.
- :class:`GatedMetric` -- the static metric plus a gated input-adaptive part (issue 23):
  m_i(x) = m0_i + g_i * Delta_i(x), with the gate g_i of head i starting at 0, so training starts from
  the static metric and the data-adaptive part grows only as far as it helps. Optionally Delta_i is
  rescaled to the Frobenius norm of the identity (``delta_norm``), so |g_i| is the adaptive part's size
  relative to the initial metric, and the generator may emit a rank-r Delta_i = U_i(x) V_i^T (``rank``).

Both come in two parameterisations of the same function (damcha.md §10):

- ``"full"``: the reference parameter, D*D outputs (M0 of shape [D, D] for the static ablation);
- ``"compact"``: only the block-column sums of that parameter are stored, since the forward pass sees
  nothing else. Training it with learning rate x H and AdamW weight decay / H (see
  ``tied_parameters`` and ``ForecastModel.parameter_groups``) reproduces the full model's training.

Shapes: B batch, T tokens, D model width, H heads, dh = D / H head width, w last hidden width.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from damcha_ts.errors import ConfigError
from damcha_ts.models.validation import check_choice, check_heads

PARAMETERIZATIONS = ("compact", "full")
#: How the generator's last layer starts: "default" is the reference (PyTorch's Linear init);
#: "identity" is an ablation that starts every head metric at the identity, as the static metric does,
#: and lets the input-adaptive part grow from zero.
GENERATOR_INITS = ("default", "identity")


def mean_context(tokens: Tensor, key_padding_mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
    """Padding-aware mean of the tokens (damcha.md §1.2).

    tokens [B, T, D]; key_padding_mask [B, T] (True / 1 = real token) or None.
    Returns [B, D] (non-causal: the mean over real tokens), or [B, T, D] when ``is_causal``: the prefix
    mean up to and including token t. A context without any real token is 0 (the count is clamped to 1).
    """
    if key_padding_mask is None:
        if not is_causal:
            return tokens.mean(dim=1)
        counts = torch.arange(1, tokens.shape[1] + 1, device=tokens.device, dtype=tokens.dtype)
        return tokens.cumsum(dim=1) / counts[:, None]
    valid = key_padding_mask.to(tokens.dtype).unsqueeze(-1)  # [B, T, 1]
    weighted = tokens * valid
    if is_causal:
        return weighted.cumsum(dim=1) / valid.cumsum(dim=1).clamp_min(1.0)
    return weighted.sum(dim=1) / valid.sum(dim=1).clamp_min(1.0)


class MetricGenerator(nn.Module):
    """Data-adaptive metric generator f_theta with the fused RowSum (damcha.md §1.3, §2, §10).

    context [..., D] -> hidden MLP (Linear, GELU, Dropout per width) -> h [..., w]
    -> head metrics W_red h + b_red, viewed as [..., H, dh, dh].

    ``rank=r < dh`` (compact only) makes the metrics low-rank: the last layer emits U_i(x) [dh, r] per
    head and the metric is U_i(x) V_i^T with a learned basis V_i [dh, r] (the first r columns of the
    identity at init). The last layer shrinks by dh / r (the bulk of DAMCHA's extra parameters); with
    r = dh and V = I it is exactly the full-rank generator, from the same seed.

    With ``"full"`` the stored last layer is the reference [D*D, w] weight; each call reduces it over the
    H block-columns (W_red = sum_j W[(i,p,j,q)], a [D*dh, w] tensor), which gives the same metrics and
    the same gradients as forming M and summing its blocks. With ``"compact"`` W_red and b_red are the
    parameters themselves (H times fewer).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        hidden: tuple[int, ...] = (256, 512),
        dropout: float = 0.1,
        parameterization: str = "compact",
        init: str = "default",
        rank: int | None = None,
    ) -> None:
        super().__init__()
        check_choice("parameterization", parameterization, PARAMETERIZATIONS)
        check_choice("generator_init", init, GENERATOR_INITS)
        self.head_dim = check_heads(d_model, n_heads)
        self.d_model, self.n_heads, self.parameterization = d_model, n_heads, parameterization
        self.init = init
        self.rank = check_rank(rank, self.head_dim, parameterization, init)
        layers: list[nn.Module] = []
        width = d_model
        for hidden_width in hidden:
            layers += [nn.Linear(width, hidden_width), nn.GELU(), nn.Dropout(dropout)]
            width = hidden_width
        self.hidden_layers = nn.Sequential(*layers)
        self.width = width
        if parameterization == "full":
            self.output_weight = nn.Parameter(torch.empty(d_model * d_model, width))
            self.output_bias = nn.Parameter(torch.empty(d_model * d_model))
        else:  # rows (head i, row p, column q < rank)
            self.reduced_weight = nn.Parameter(torch.empty(d_model * self.rank, width))
            self.reduced_bias = nn.Parameter(torch.empty(d_model * self.rank))
        if self.rank < self.head_dim:
            self.rank_basis = nn.Parameter(torch.eye(self.head_dim)[:, : self.rank].repeat(n_heads, 1, 1))
        self.reset_last_layer()

    @torch.no_grad()
    def reset_last_layer(self) -> None:
        """PyTorch's default Linear init, U(-1/sqrt(w), 1/sqrt(w)), for the full D*D-output layer.

        The draws are made one block-row of M at a time, in the same order for both parameterisations;
        "compact" keeps only their block-column sums (damcha.md §10 (a)). So, from the same seed, a
        compact and a full generator start with the same head metrics, and compact never allocates the
        D*D*w tensor (512 MiB at D = w = 512).

        With ``init="identity"`` the weight starts at zero and the bias at M = I (identity diagonal
        blocks, zero off-diagonal ones), so every head metric starts at the dh x dh identity for
        every input; the two parameterisations again start equal (their block-column sums agree).
        """
        if self.init == "identity":
            self._reset_to_identity()
            return
        H, dh, r, w = self.n_heads, self.head_dim, self.rank, self.width
        bound = 1.0 / math.sqrt(w)
        like = self.output_weight if self.parameterization == "full" else self.reduced_weight
        for i in range(H):
            block_row = torch.empty(dh, H, r, w, dtype=like.dtype, device=like.device)
            block_row.uniform_(-bound, bound)  # rows (p, j, q) of block-row i
            if self.parameterization == "full":
                self.output_weight.view(H, dh, H, dh, w)[i] = block_row
            else:
                self.reduced_weight.view(H, dh, r, w)[i] = block_row.sum(dim=1)
        bias = torch.empty(H, dh, H, r, dtype=like.dtype, device=like.device).uniform_(-bound, bound)
        if self.parameterization == "full":
            self.output_bias.copy_(bias.flatten())
        else:
            self.reduced_bias.copy_(bias.sum(dim=2).flatten())

    def _reset_to_identity(self) -> None:
        H, dh = self.n_heads, self.head_dim  # check_rank: identity needs full rank
        if self.parameterization == "full":
            self.output_weight.zero_()
            self.output_bias.copy_(torch.eye(self.d_model).flatten())
        else:
            self.reduced_weight.zero_()
            self.reduced_bias.copy_(torch.eye(dh).repeat(H, 1, 1).flatten())

    def tied_parameters(self) -> list[nn.Parameter]:
        """Parameters that stand for H tied full-model rows: they need lr x H, weight decay / H."""
        if self.parameterization == "compact":
            return [self.reduced_weight, self.reduced_bias]
        return []

    def reduced_last_layer(self) -> tuple[Tensor, Tensor]:
        """(W_red [D*r, w], b_red [D*r]), rows ordered (head i, row p, column q < r) (Eq. 4 fused;
        r = dh unless ``rank`` is set)."""
        if self.parameterization == "compact":
            return self.reduced_weight, self.reduced_bias
        H, dh, w = self.n_heads, self.head_dim, self.width
        # Row (i*dh + p)*D + j*dh + q of the full layer is entry (p, q) of block M_ij: sum over j.
        weight = self.output_weight.view(H, dh, H, dh, w).sum(dim=2).reshape(H * dh * dh, w)
        bias = self.output_bias.view(H, dh, H, dh).sum(dim=2).reshape(H * dh * dh)
        return weight, bias

    def metrics_from_context(self, context: Tensor) -> Tensor:
        """context [..., D] -> head metrics [..., H, dh, dh]."""
        return self._head_metrics(self.hidden_layers(context))

    def _head_metrics(self, hidden: Tensor) -> Tensor:
        """hidden [..., w] -> head metrics [..., H, dh, dh]."""
        weight, bias = self.reduced_last_layer()
        metrics = nn.functional.linear(hidden, weight, bias)
        metrics = metrics.view(*hidden.shape[:-1], self.n_heads, self.head_dim, self.rank)
        if self.rank < self.head_dim:  # U_i(x) V_i^T
            metrics = metrics @ self.rank_basis.transpose(-1, -2)
        return metrics

    def forward(
        self, tokens: Tensor, key_padding_mask: Tensor | None = None, is_causal: bool = False
    ) -> Tensor:
        """tokens [B, T, D] -> head metrics [B, H, dh, dh] (causal: [B, T, H, dh, dh])."""
        return self.metrics_from_context(mean_context(tokens, key_padding_mask, is_causal))

    def with_full_metric(
        self, tokens: Tensor, key_padding_mask: Tensor | None = None, is_causal: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """(head metrics, the cross-head metric M [B, D, D] or None unless ``"full"``) from one pass
        through the hidden layers, so in training mode both see the same dropout draw."""
        hidden = self.hidden_layers(mean_context(tokens, key_padding_mask, is_causal))
        if self.parameterization != "full":
            return self._head_metrics(hidden), None
        metric = nn.functional.linear(hidden, self.output_weight, self.output_bias)
        return self._head_metrics(hidden), metric.view(*hidden.shape[:-1], self.d_model, self.d_model)

    def full_metric(
        self, tokens: Tensor, key_padding_mask: Tensor | None = None, is_causal: bool = False
    ) -> Tensor:
        """The cross-head metric M [B, D, D] (causal: [B, T, D, D]), for plots; needs ``"full"``."""
        if self.parameterization != "full":
            raise ConfigError(
                "the full cross-head metric needs parameterization='full'; 'compact' stores only the "
                "block-row sums"
            )
        return self.with_full_metric(tokens, key_padding_mask, is_causal)[1]


def check_rank(rank: int | None, head_dim: int, parameterization: str, init: str) -> int:
    """The generator's metric rank: ``None`` is full rank (dh); otherwise 1 <= rank <= dh, compact
    only (the full D*D layer has no low-rank form here) and with the reference init."""
    if rank is None:
        return head_dim
    if isinstance(rank, bool) or not isinstance(rank, int) or not 1 <= rank <= head_dim:
        raise ConfigError(f"metric_rank={rank!r}; expected null (full rank) or an integer in 1..{head_dim} "
                          "(the head width d_model / n_heads)")
    if rank < head_dim and parameterization != "compact":
        raise ConfigError(f"metric_rank={rank} needs parameterization='compact'")
    if rank < head_dim and init != "default":
        raise ConfigError(f"metric_rank={rank} needs generator_init='default': a rank-{rank} metric "
                          "cannot start at the identity")
    return rank


class StaticMetric(nn.Module):
    """Static-metric ablation (damcha.md §3.3): one trainable metric for every input, identity at init.

    "full" stores M0 [D, D] and returns its block-row sums; "compact" stores those sums [H, dh, dh]
    directly (both are the dh x dh identity per head at init, so scores start as X_i X_i^T / sqrt(dh)).
    The call signature matches :class:`MetricGenerator`; the inputs are ignored.
    """

    def __init__(self, d_model: int, n_heads: int, parameterization: str = "compact") -> None:
        super().__init__()
        check_choice("parameterization", parameterization, PARAMETERIZATIONS)
        self.head_dim = check_heads(d_model, n_heads)
        self.d_model, self.n_heads, self.parameterization = d_model, n_heads, parameterization
        if parameterization == "full":
            self.metric = nn.Parameter(torch.eye(d_model))
        else:
            self.reduced_metric = nn.Parameter(torch.eye(self.head_dim).repeat(n_heads, 1, 1))

    def tied_parameters(self) -> list[nn.Parameter]:
        return [self.reduced_metric] if self.parameterization == "compact" else []

    def forward(
        self, tokens: Tensor | None = None, key_padding_mask: Tensor | None = None, is_causal: bool = False
    ) -> Tensor:
        """-> head metrics [H, dh, dh], shared by every sample and token."""
        if self.parameterization == "compact":
            return self.reduced_metric
        H, dh = self.n_heads, self.head_dim
        return self.metric.view(H, dh, H, dh).sum(dim=2)

    def with_full_metric(
        self, tokens: Tensor | None = None, key_padding_mask: Tensor | None = None, is_causal: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """(head metrics, M0 [D, D] or None unless ``"full"``), as for :class:`MetricGenerator`."""
        return self(), (self.metric if self.parameterization == "full" else None)

    def full_metric(
        self, tokens: Tensor | None = None, key_padding_mask: Tensor | None = None, is_causal: bool = False
    ) -> Tensor:
        """M0 [D, D]; needs ``"full"``."""
        if self.parameterization != "full":
            raise ConfigError("the full static metric needs parameterization='full'")
        return self.metric


class GatedMetric(nn.Module):
    """m_i(x) = m0_i + g_i * Delta_i(x): a :class:`StaticMetric` m0 (identity at init), a
    :class:`MetricGenerator` Delta (the reference's init) and one learnable gate per head, 0 at init.

    With every gate at 0 it computes exactly the static metric, for every input; the gates get a
    gradient from the first step (Delta is not zero), the generator only once they move.

    ``delta_norm=True`` controls the adaptive part's scale: Delta_i(x) is replaced by
    sqrt(dh) * Delta_i(x) / ||Delta_i(x)||_F, the Frobenius norm of the dh x dh identity, so
    ||g_i Delta_i|| / ||m0_i(0)|| = |g_i| whatever the generator's output scale (the default
    generator's metrics are far larger than the identity, which makes its scores sharp).
    """

    def __init__(self, static: StaticMetric, adaptive: MetricGenerator, delta_norm: bool = False) -> None:
        super().__init__()
        self.static, self.adaptive, self.delta_norm = static, adaptive, delta_norm
        self.d_model, self.n_heads, self.head_dim = static.d_model, static.n_heads, static.head_dim
        self.parameterization = static.parameterization
        self.gate = nn.Parameter(torch.zeros(static.n_heads))

    def tied_parameters(self) -> list[nn.Parameter]:
        return [*self.static.tied_parameters(), *self.adaptive.tied_parameters()]

    def _head_scale(self, adaptive: Tensor) -> Tensor:
        """adaptive head metrics [..., H, dh, dh] -> the factor g_i (times the norm's) [..., H]."""
        if not self.delta_norm:
            return self.gate.expand(adaptive.shape[:-2])
        norms = torch.linalg.matrix_norm(adaptive).clamp_min(1e-6)  # [..., H]
        return self.gate * math.sqrt(self.head_dim) / norms

    def forward(
        self, tokens: Tensor, key_padding_mask: Tensor | None = None, is_causal: bool = False
    ) -> Tensor:
        """tokens [B, T, D] -> head metrics [B, H, dh, dh] (causal: [B, T, H, dh, dh])."""
        adaptive = self.adaptive(tokens, key_padding_mask, is_causal)
        return self.static() + self._head_scale(adaptive)[..., None, None] * adaptive

    def with_full_metric(
        self, tokens: Tensor, key_padding_mask: Tensor | None = None, is_causal: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """(head metrics, M0 + S M(x) [B, D, D] or None unless ``"full"``); S scales block-row i of M
        by head i's factor, so the block-row sums are still the head metrics (Eq. 4)."""
        adaptive, metric = self.adaptive.with_full_metric(tokens, key_padding_mask, is_causal)
        scale = self._head_scale(adaptive)  # [..., H]
        head_metrics = self.static() + scale[..., None, None] * adaptive
        if metric is None:
            return head_metrics, None
        rows = scale.repeat_interleave(self.head_dim, dim=-1)[..., None]  # [..., D, 1]
        return head_metrics, self.static.metric + rows * metric

    def full_metric(
        self, tokens: Tensor, key_padding_mask: Tensor | None = None, is_causal: bool = False
    ) -> Tensor:
        if self.parameterization != "full":
            raise ConfigError("the full gated metric needs parameterization='full'")
        return self.with_full_metric(tokens, key_padding_mask, is_causal)[1]


def make_metric_generator(
    d_model: int,
    n_heads: int,
    *,
    hidden: tuple[int, ...],
    dropout: float,
    parameterization: str,
    static_metric: bool,
    init: str = "default",
    metric_gate: bool = False,
    rank: int | None = None,
    delta_norm: bool = False,
) -> MetricGenerator | StaticMetric | GatedMetric:
    """The metric source an AttentionConfig asks for: data-adaptive, the static ablation (which
    always starts at the identity), or the static metric with a gated adaptive part."""
    if static_metric:
        return StaticMetric(d_model, n_heads, parameterization)
    adaptive = MetricGenerator(d_model, n_heads, hidden, dropout, parameterization, init, rank)
    if metric_gate:
        return GatedMetric(StaticMetric(d_model, n_heads, parameterization), adaptive, delta_norm)
    return adaptive
