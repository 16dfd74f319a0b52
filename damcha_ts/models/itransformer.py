"""iTransformer (Liu et al., ICLR 2024) with MHA or DAMCHA attention over variate tokens.

Architecture as protocol.md §2.1: series normalisation -> inverted embedding (each variate's whole
lookback is one token; time marks add one token per mark feature) -> e_layers post-norm encoder layers
-> LayerNorm -> Linear(E -> pred_len) per token -> keep the N variate tokens -> de-normalisation.

With ``attention="damcha"`` the whole attention layer (Q/K/V/O and the inner attention) is replaced by
DAMCHA attention (damcha.md §9). A shared generator sees the embedding output, mark tokens included:
marks are tokens like any other and enter the mean context.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from damcha_ts.models.attention import ATTENTION_KINDS, AttentionConfig, AttentionRecord, DamchaOptions
from damcha_ts.models.base import ForecastModel
from damcha_ts.models.embedding import InvertedEmbedding, SeriesNormalizer
from damcha_ts.models.layers import ACTIVATIONS, PostNormEncoderLayer, build_encoder
from damcha_ts.models.validation import (
    check_bools,
    check_choice,
    check_dropout,
    check_heads,
    check_positive_ints,
)


@dataclass(kw_only=True)
class ITransformerConfig(DamchaOptions):
    """iTransformer hyperparameters (TSLib run.py defaults); DAMCHA options in DamchaOptions."""

    seq_len: int = 96
    pred_len: int = 96
    d_model: int = 512
    n_heads: int = 8
    e_layers: int = 2
    d_ff: int = 2048
    dropout: float = 0.1
    activation: str = "gelu"
    use_norm: bool = True
    use_time_marks: bool = True
    attention: str = "mha"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive_ints(self, ("seq_len", "pred_len", "d_model", "n_heads", "e_layers", "d_ff"))
        check_dropout(self.dropout)
        check_choice("activation", self.activation, tuple(ACTIVATIONS))
        check_choice("attention", self.attention, ATTENTION_KINDS)
        check_heads(self.d_model, self.n_heads)
        check_bools(self, ("use_norm", "use_time_marks"))

    def attention_config(self) -> AttentionConfig:
        return AttentionConfig(
            kind=self.attention, n_heads=self.n_heads, dropout=self.dropout, **self.damcha_options()
        )


class ITransformer(ForecastModel):
    """iTransformer; ``forward(x [B, L, N], x_mark [B, L, M] | None) -> [B, pred_len, N]``."""

    def __init__(self, config: ITransformerConfig):
        super().__init__()
        self.config = config
        c = config
        self.embedding = InvertedEmbedding(c.seq_len, c.d_model, c.dropout)
        self.encoder = build_encoder(
            lambda attention: PostNormEncoderLayer(attention, c.d_model, c.d_ff, c.dropout, c.activation),
            c.e_layers,
            c.d_model,
            c.attention_config(),
            final_norm=nn.LayerNorm(c.d_model),
        )
        self.projection = nn.Linear(c.d_model, c.pred_len)

    @property
    def name(self) -> str:
        return f"itransformer_{self.config.attention}"

    def _forecast(
        self, x: Tensor, x_mark: Tensor | None, need_weights: bool
    ) -> tuple[Tensor, dict[str, list[AttentionRecord]]]:
        n_variates = x.shape[2]
        if self.config.use_norm:
            x, stats = SeriesNormalizer.normalize(x)
        marks = x_mark if self.config.use_time_marks else None
        variate_tokens = self.embedding(x, marks)  # [B, N + M, E]
        encoded, records = self.encoder(variate_tokens, need_weights=need_weights)
        # Mark tokens are dropped after the projection: only variates are forecast.
        forecast = self.projection(encoded)[:, :n_variates, :].transpose(1, 2)  # [B, H, N]
        if self.config.use_norm:
            forecast = SeriesNormalizer.denormalize(forecast, stats)
        return forecast, {"encoder": records}
