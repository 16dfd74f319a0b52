"""Per-column z-scoring with train-only statistics (protocol.md §1.2), for targets and covariates."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class StandardScaler:
    """Per-column z-scoring with the population std (ddof=0), as sklearn's StandardScaler.

    A constant column gets scale 1 (sklearn does the same) so it maps to zeros instead of NaN.
    ``transform`` / ``inverse_transform`` accept NumPy arrays or torch tensors whose last axis
    holds the columns.
    """

    def __init__(self, mean: np.ndarray, scale: np.ndarray):
        self.mean_ = np.asarray(mean, dtype=np.float64)
        self.scale_ = np.asarray(scale, dtype=np.float64)

    @classmethod
    def fit(cls, values: np.ndarray) -> StandardScaler:
        """Fit on ``values`` [T, C] (the train rows)."""
        values = np.asarray(values, dtype=np.float64)
        scale = values.std(axis=0)
        return cls(values.mean(axis=0), np.where(scale == 0.0, 1.0, scale))

    def select(self, columns: int | slice | Sequence[int]) -> StandardScaler:
        """The scaler of a subset of columns, e.g. ``select([-1])`` for the MS target."""
        if isinstance(columns, int):
            columns = [columns]
        return StandardScaler(self.mean_[columns], self.scale_[columns])

    def _stats_like(self, x):
        if isinstance(x, np.ndarray):
            return self.mean_, self.scale_
        import torch

        as_tensor = lambda a: torch.as_tensor(a, dtype=x.dtype, device=x.device)  # noqa: E731
        return as_tensor(self.mean_), as_tensor(self.scale_)

    def transform(self, x):
        """(x - mean) / scale over the last axis [..., C]."""
        mean, scale = self._stats_like(x)
        return (x - mean) / scale

    def inverse_transform(self, x):
        """x * scale + mean over the last axis [..., C]: back to the raw scale."""
        mean, scale = self._stats_like(x)
        return x * scale + mean
