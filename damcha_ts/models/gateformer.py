"""Gateformer (Lan & Oermann, 2025) with MHA or DAMCHA in either of its two encoders.

Architecture as protocol.md §3.1 (shapes: B batch, L lookback, N variates, E d_model, P patches):

1. series normalisation (always on);
2. global embedding: Linear(L -> E) + dropout on each variate's series, no marks     -> [B, N, E];
3. temporal branch: patches of each series -> pre-norm encoder across the P patches of one variate
   -> flatten + Linear(P*E -> E) + dropout                                            -> [B, N, E];
4. gate 1 fuses the two embeddings: g = sigmoid(W1 global + W2 temporal), h = g*global + (1-g)*temporal;
5. variate-wise pre-norm encoder across the N variate tokens                          -> h_cross;
6. gate 2: g = sigmoid(W3 h + W4 h_cross), z = g*h + (1-g)*h_cross;
7. Linear(E -> pred_len) per variate, transposed to [B, pred_len, N], de-normalised.

Covariates (``Covariates``) join the variate-wise encoder as tokens that are never forecast: past
covariates through steps 2-4 like variates, future and static ones through ``CovariateEmbedding``.

Both encoders are stacks of ``nn.TransformerEncoderLayer(norm_first=True)`` layers (ReLU, no final norm),
rebuilt as pre-norm :class:`~damcha_ts.models.layers.EncoderLayer` so that ``temporal_attention`` / ``variate_attention`` can be
DAMCHA. The standard DAMCHA variant replaces only the variate-wise attention; with a shared generator
its metrics come from the gate-1 output h (damcha.md §9).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from damcha_ts.errors import ConfigError
from damcha_ts.models.attention_config import ATTENTION_KINDS, AttentionRecord
from damcha_ts.models.base import Covariates, EncoderModelConfig, ForecastModel
from damcha_ts.models.embedding import PatchEmbedding, SeriesNormalizer, covariate_embedding, with_covariate_tokens
from damcha_ts.models.layers import EncoderLayer, build_encoder
from damcha_ts.models.validation import check_choice, check_positive_ints


@dataclass(kw_only=True)
class GateformerConfig(EncoderModelConfig):
    """Gateformer hyperparameters: the shared encoder fields plus patching and the two attention switches."""

    patch_len: int = 8
    stride: int = 8
    temporal_attention: str = "mha"
    variate_attention: str = "mha"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive_ints(self, ("patch_len", "stride"))
        check_choice("temporal_attention", self.temporal_attention, ATTENTION_KINDS)
        check_choice("variate_attention", self.variate_attention, ATTENTION_KINDS)
        if self.patch_len > self.seq_len + self.stride:
            raise ConfigError(
                f"patch_len={self.patch_len} is longer than the padded series (seq_len + stride = "
                f"{self.seq_len + self.stride})"
            )


class Gate(nn.Module):
    """g = sigmoid(W_a a + W_b b); returns g * a + (1 - g) * b.  a, b [..., E] -> [..., E]."""

    def __init__(self, d_model: int):
        super().__init__()
        self.first = nn.Linear(d_model, d_model)
        self.second = nn.Linear(d_model, d_model)

    def forward(self, a: Tensor, b: Tensor) -> Tensor:
        gate = torch.sigmoid(self.first(a) + self.second(b))
        return gate * a + (1.0 - gate) * b


class Gateformer(ForecastModel):
    """Gateformer; ``forward(x [B, L, N], x_mark=None) -> [B, pred_len, N]``. Time marks are not used."""

    def __init__(self, config: GateformerConfig):
        super().__init__()
        self.config = config
        c = config

        def pre_norm_layer(attention: nn.Module) -> EncoderLayer:
            return EncoderLayer(attention, c.d_model, c.d_ff, c.dropout, "relu", norm_first=True)

        self.global_embedding = nn.Linear(c.seq_len, c.d_model)
        self.patch_embedding = PatchEmbedding(c.seq_len, c.d_model, c.patch_len, c.stride, c.dropout)
        self.temporal_encoder = build_encoder(pre_norm_layer, c.e_layers, c.d_model,
                                              c.attention_config(c.temporal_attention))
        self.temporal_head = nn.Linear(self.patch_embedding.n_patches * c.d_model, c.d_model)
        self.fusion_gate = Gate(c.d_model)
        self.variate_encoder = build_encoder(pre_norm_layer, c.e_layers, c.d_model,
                                             c.attention_config(c.variate_attention))
        self.cross_variate_gate = Gate(c.d_model)
        self.projection = nn.Linear(c.d_model, c.pred_len)
        self.dropout = nn.Dropout(c.dropout)
        self.covariate_embedding = covariate_embedding(c)  # None without future/static covariates

    @property
    def name(self) -> str:
        return f"gateformer_{self.config.variate_attention}"

    def _forecast(
        self, x: Tensor, x_mark: Tensor | None, need_weights: bool, covariates: Covariates | None = None
    ) -> tuple[Tensor, dict[str, list[AttentionRecord]]]:
        B, _, N = x.shape
        x, stats = SeriesNormalizer.normalize(x)
        past = getattr(covariates, "past", None)
        if past is not None:  # lookback series like the variates: the same global and temporal paths
            x = torch.cat([x, past.to(x.dtype)], dim=2)  # [B, L, N + P]
        series = x.transpose(1, 2)  # [B, N + P, L]
        tokens = series.shape[1]
        global_tokens = self.dropout(self.global_embedding(series))  # [B, N + P, E]
        patches = self.patch_embedding(series)  # [B * (N + P), P_patches, E]
        temporal, temporal_records = self.temporal_encoder(patches, need_weights=need_weights)
        temporal_tokens = self.dropout(self.temporal_head(temporal.reshape(B, tokens, -1)))  # [B, N + P, E]
        variate_tokens = self.fusion_gate(global_tokens, temporal_tokens)  # h
        variate_tokens = with_covariate_tokens(variate_tokens, self.covariate_embedding, covariates)  # + F (+ 1)
        cross, variate_records = self.variate_encoder(variate_tokens, need_weights=need_weights)
        fused = self.cross_variate_gate(variate_tokens, cross)  # z
        # Covariate tokens are read, never forecast: keep the N variates.
        forecast = self.projection(fused)[:, :N, :].transpose(1, 2)  # [B, pred_len, N]
        maps = {"temporal_encoder": temporal_records, "variate_encoder": variate_records}
        return SeriesNormalizer.denormalize(forecast, stats), maps
