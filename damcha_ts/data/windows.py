"""Stride-1 forecasting windows over one split, batched by tensor indexing.

Window i of a split covers the split's rows [i, i + L) as input and [i + L, i + L + H) as target
(protocol.md §1.3; ``label_len`` is not served because iTransformer and Gateformer ignore it).
A whole batch is gathered with one advanced-indexing call per tensor instead of a Python loop
per sample, so the training step does not wait on data.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset


class WindowDataset(Dataset):
    """The windows of one split of a ``SeriesData`` (data/protocol.py; not imported: protocol makes these).

    Items and batches are dicts of float32 tensors:
    ``x`` [B, L, C], ``y`` [B, H, C], ``x_mark`` [B, L, M], ``y_mark`` [B, H, M]
    (no batch axis for a single item). In ``MS`` mode ``y`` still carries all C columns: the
    consumer slices the target, ``y[..., -1:]``, as TSLib's ``f_dim = -1`` does. A series with
    covariates adds ``past_covariates`` [B, L, P] (the lookback rows) and ``future_covariates``
    [B, L + H, F] (lookback and horizon rows: they are known in advance); an entity's series adds
    its ``static_covariates`` [B, S].
    """

    def __init__(self, data, split: str):
        border1, border2 = data.borders[split]
        self.split = split
        self.seq_len = data.seq_len
        self.pred_len = data.pred_len
        self.n_windows = data.window_count(split)
        # Views of the split's rows (no copy): [rows, C] and [rows, M].
        self.series = torch.from_numpy(data.scaled[border1:border2])
        self.marks = torch.from_numpy(data.marks[border1:border2])
        covariates = getattr(data, "covariates", None)
        past, future = (None, None) if covariates is None else (covariates.past, covariates.future)
        self.past = None if past is None else torch.from_numpy(past[border1:border2])  # [rows, P]
        self.future = None if future is None else torch.from_numpy(future[border1:border2])  # [rows, F]
        static = getattr(data, "static_covariates", None)  # an entity's [S]: the same for all its windows
        self.static = None if static is None else torch.from_numpy(np.asarray(static, dtype=np.float32))
        self._input_offsets = torch.arange(self.seq_len)
        self._target_offsets = torch.arange(self.seq_len, self.seq_len + self.pred_len)

    def __len__(self) -> int:
        return self.n_windows

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        if not -self.n_windows <= i < self.n_windows:
            raise IndexError(f"window {i} out of range for the {self.n_windows} {self.split} windows")
        i %= self.n_windows
        batch = self.batch(torch.tensor([i]))
        return {key: value[0] for key, value in batch.items()}

    def batch(self, indices: torch.Tensor) -> dict[str, torch.Tensor]:
        """Windows ``indices`` [B] (LongTensor) as contiguous tensors (see the class docstring)."""
        indices = torch.as_tensor(indices, dtype=torch.long)
        input_rows = indices[:, None] + self._input_offsets  # [B, L]
        target_rows = indices[:, None] + self._target_offsets  # [B, H]
        batch = {
            "x": _gather_rows(self.series, input_rows),
            "y": _gather_rows(self.series, target_rows),
            "x_mark": _gather_rows(self.marks, input_rows),
            "y_mark": _gather_rows(self.marks, target_rows),
        }
        if self.past is not None:
            batch["past_covariates"] = _gather_rows(self.past, input_rows)
        if self.future is not None:
            batch["future_covariates"] = _gather_rows(self.future, torch.cat([input_rows, target_rows], dim=1))
        if self.static is not None:
            batch["static_covariates"] = self.static.expand(len(indices), -1).contiguous()
        return batch

    # DataLoader's fetcher calls this with a whole batch of indices when it exists, so a
    # BatchSampler yields one gathered batch instead of B single items to collate.
    def __getitems__(self, indices: list[int]) -> dict[str, torch.Tensor]:
        return self.batch(torch.as_tensor(indices, dtype=torch.long))


def _gather_rows(table: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """table [T, K] gathered at rows [B, S] -> [B, S, K], one contiguous copy (index_select)."""
    return table.index_select(0, rows.reshape(-1)).view(*rows.shape, table.shape[1])


def keep_batch(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """collate_fn for batches that ``__getitems__`` already gathered (module level: picklable)."""
    return batch
