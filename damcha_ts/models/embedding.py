"""Series normalisation and the token embeddings of iTransformer and Gateformer.

Shapes: B batch, L lookback (seq_len), N variates, E d_model, P patches.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class SeriesNormalizer:
    """Per-sample, per-variate normalisation over time (protocol.md §2.1 step 1).

    mu is the mean over time (detached); sigma = sqrt(biased variance + 1e-5) is *not* detached, as in
    iTransformer. ``normalize`` returns the normalised series and the statistics that ``denormalize``
    uses to map forecasts back to the input's scale.
    """

    eps = 1e-5

    @staticmethod
    def normalize(x: Tensor) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """x [B, L, N] -> (normalised x [B, L, N], (mu [B, 1, N], sigma [B, 1, N]))."""
        mean = x.mean(dim=1, keepdim=True).detach()
        centred = x - mean
        std = torch.sqrt(centred.var(dim=1, keepdim=True, unbiased=False) + SeriesNormalizer.eps)
        return centred / std, (mean, std)

    @staticmethod
    def denormalize(y: Tensor, stats: tuple[Tensor, Tensor]) -> Tensor:
        """y [B, pred_len, N] -> y * sigma + mu."""
        mean, std = stats
        return y * std + mean


class InvertedEmbedding(nn.Module):
    """iTransformer's DataEmbedding_inverted: each whole series becomes one token.

    series [B, L, N] and optional marks [B, L, M] -> tokens [B, N (+ M), E]: the marks' columns are
    appended as extra tokens, then one Linear(L -> E) shared by all tokens, then dropout. No positional
    or variate-identity embedding, so the token order carries no information (iTransformer #13).
    """

    def __init__(self, seq_len: int, d_model: int, dropout: float):
        super().__init__()
        self.value_embedding = nn.Linear(seq_len, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, series: Tensor, marks: Tensor | None = None) -> Tensor:
        tokens = series.transpose(1, 2)  # [B, N, L]
        if marks is not None:
            tokens = torch.cat([tokens, marks.transpose(1, 2).to(tokens.dtype)], dim=1)
        return self.dropout(self.value_embedding(tokens))


class CovariateEmbedding(nn.Module):
    """Tokens of the covariates that do not live on the lookback alone (issue 20):

    each future covariate's lookback *and* horizon values [B, L + H, F] -> one token per covariate
    (Linear(L + H -> E), so the model sees the covariate's future), and the static covariates
    [B, S] -> one token (Linear(S -> E)); then dropout. ``forward`` -> [B, F (+ 1), E] or None.
    Past covariates are series over the lookback: each model embeds them as it embeds its variates.
    """

    def __init__(self, seq_len: int, pred_len: int, d_model: int, future: int, static: int, dropout: float):
        super().__init__()
        self.future_embedding = nn.Linear(seq_len + pred_len, d_model) if future else None
        self.static_embedding = nn.Linear(static, d_model) if static else None
        self.dropout = nn.Dropout(dropout)

    def forward(self, covariates) -> Tensor | None:
        tokens = []
        if self.future_embedding is not None:
            tokens.append(self.future_embedding(covariates.future.transpose(1, 2)))  # [B, F, E]
        if self.static_embedding is not None:
            tokens.append(self.static_embedding(covariates.static)[:, None, :])  # [B, 1, E]
        return self.dropout(torch.cat(tokens, dim=1)) if tokens else None


def covariate_embedding(config) -> CovariateEmbedding | None:
    """The model's CovariateEmbedding, or None when its config counts no future or static covariates
    (then the model has exactly the parameters, and initial weights, it had before covariates)."""
    if not (config.future_covariates or config.static_covariates):
        return None
    return CovariateEmbedding(config.seq_len, config.pred_len, config.d_model, config.future_covariates,
                              config.static_covariates, config.dropout)


def with_covariate_tokens(tokens: Tensor, embedding: CovariateEmbedding | None, covariates) -> Tensor:
    """tokens [B, T, E] followed by the covariate tokens [B, F (+ 1), E], when there are any."""
    extra = embedding(covariates) if embedding is not None else None
    return tokens if extra is None else torch.cat([tokens, extra.to(tokens.dtype)], dim=1)


def sinusoidal_positions(n_positions: int, d_model: int) -> Tensor:
    """Fixed sine/cosine position codes [n_positions, E] (Transformer / PatchTST PositionalEmbedding)."""
    position = torch.arange(n_positions, dtype=torch.float32)[:, None]
    frequency = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    codes = torch.zeros(n_positions, d_model)
    codes[:, 0::2] = torch.sin(position * frequency)
    codes[:, 1::2] = torch.cos(position * frequency[: d_model // 2])
    return codes


class PatchEmbedding(nn.Module):
    """PatchTST-style patches of each variate's series (protocol.md §3.1 step 3).

    series tokens [B, N, L] -> replicate-pad ``stride`` steps on the right -> patches of ``patch_len``
    every ``stride`` steps -> Linear(patch_len -> E, no bias) + sinusoidal positions -> dropout
    -> [B * N, P, E], P = (L + stride - patch_len) // stride + 1 (13 at L = 96, patch 8, stride 8).
    """

    def __init__(self, seq_len: int, d_model: int, patch_len: int, stride: int, dropout: float):
        super().__init__()
        self.patch_len, self.stride = patch_len, stride
        self.n_patches = (seq_len + stride - patch_len) // stride + 1
        self.padding = nn.ReplicationPad1d((0, stride))
        self.value_embedding = nn.Linear(patch_len, d_model, bias=False)
        self.register_buffer("positions", sinusoidal_positions(self.n_patches, d_model), persistent=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, series_tokens: Tensor) -> Tensor:
        B, N, _ = series_tokens.shape
        patches = self.padding(series_tokens).unfold(-1, self.patch_len, self.stride)  # [B, N, P, patch_len]
        patches = patches.reshape(B * N, self.n_patches, self.patch_len)
        embedded = self.value_embedding(patches) + self.positions.to(patches.dtype)
        return self.dropout(embedded)
