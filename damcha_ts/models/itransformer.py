"""iTransformer (Liu et al., ICLR 2024) with MHA or DAMCHA attention over variate tokens.

Architecture as protocol.md §2.1: series normalisation -> inverted embedding (each variate's whole
lookback is one token; time marks add one token per mark feature) -> e_layers post-norm encoder layers
-> LayerNorm -> Linear(E -> pred_len) per token -> keep the N variate tokens -> de-normalisation.
Covariates (``Covariates``) are more tokens that are read and never forecast: past covariates like
marks, future ones from their lookback and horizon values, static ones as one token.

With ``attention="damcha"`` the whole attention layer (Q/K/V/O and the inner attention) is replaced by
DAMCHA attention (damcha.md §9). A shared generator sees the embedding output, mark tokens included:
marks are tokens like any other and enter the mean context.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from damcha_ts.models.attention_config import ATTENTION_KINDS, AttentionRecord
from damcha_ts.models.base import Covariates, EncoderModelConfig, ForecastModel
from damcha_ts.models.embedding import InvertedEmbedding, SeriesNormalizer, covariate_embedding, with_covariate_tokens
from damcha_ts.models.layers import ACTIVATIONS, EncoderLayer, build_encoder
from damcha_ts.models.validation import check_bools, check_choice


@dataclass(kw_only=True)
class ITransformerConfig(EncoderModelConfig):
    """iTransformer hyperparameters: the shared encoder fields plus the ones below."""

    activation: str = "gelu"
    use_norm: bool = True
    use_time_marks: bool = True
    attention: str = "mha"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("activation", self.activation, tuple(ACTIVATIONS))
        check_choice("attention", self.attention, ATTENTION_KINDS)
        check_bools(self, ("use_norm", "use_time_marks"))


class ITransformer(ForecastModel):
    """iTransformer; ``forward(x [B, L, N], x_mark [B, L, M] | None) -> [B, pred_len, N]``."""

    def __init__(self, config: ITransformerConfig):
        super().__init__()
        self.config = config
        c = config
        self.embedding = InvertedEmbedding(c.seq_len, c.d_model, c.dropout)
        self.encoder = build_encoder(
            lambda attention: EncoderLayer(attention, c.d_model, c.d_ff, c.dropout, c.activation),
            c.e_layers, c.d_model, c.attention_config(c.attention), final_norm=nn.LayerNorm(c.d_model))
        self.projection = nn.Linear(c.d_model, c.pred_len)
        self.covariate_embedding = covariate_embedding(c)  # None without future/static covariates

    @property
    def name(self) -> str:
        return f"itransformer_{self.config.attention}"

    def _forecast(
        self, x: Tensor, x_mark: Tensor | None, need_weights: bool, covariates: Covariates | None = None
    ) -> tuple[Tensor, dict[str, list[AttentionRecord]]]:
        n_variates = x.shape[2]
        if self.config.use_norm:
            x, stats = SeriesNormalizer.normalize(x)
        # Past covariates are lookback series like the marks: tokens through the same embedding.
        lookback_inputs = [t for t in (getattr(covariates, "past", None),
                                       x_mark if self.config.use_time_marks else None) if t is not None]
        marks = torch.cat([t.to(x.dtype) for t in lookback_inputs], dim=2) if lookback_inputs else None
        variate_tokens = self.embedding(x, marks)  # [B, N + P + M, E]
        variate_tokens = with_covariate_tokens(variate_tokens, self.covariate_embedding, covariates)  # + F (+ 1)
        encoded, records = self.encoder(variate_tokens, need_weights=need_weights)
        # Mark and covariate tokens are dropped after the projection: only variates are forecast.
        forecast = self.projection(encoded)[:, :n_variates, :].transpose(1, 2)  # [B, pred_len, N]
        if self.config.use_norm:
            forecast = SeriesNormalizer.denormalize(forecast, stats)
        return forecast, {"encoder": records}
