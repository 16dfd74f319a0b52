"""Lightning DataModule serving the windows of a prepared series (benchmark or user data)."""

from __future__ import annotations

import lightning as L
import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, SequentialSampler

from damcha_ts.data.protocol import SeriesData
from damcha_ts.data.windows import WindowDataset, keep_batch


class ForecastDataModule(L.LightningDataModule):
    """Train/val/test loaders of dict batches ``{"x", "y", "x_mark", "y_mark"}`` (see WindowDataset).

    Batches are gathered by ``WindowDataset.__getitems__`` from a ``BatchSampler``: one indexing
    call per batch. Train shuffles and, like the iTransformer reference, drops its last partial
    batch -- unless that batch is all there is (a short series with fewer training windows than
    ``batch_size``), where dropping it would leave nothing to train on. Val and test never drop a
    window (protocol.md §1.5), so test metrics cover every window. ``seed`` fixes the train
    shuffling order independently of the global RNG; None follows torch's global RNG
    (``lightning.seed_everything``).
    """

    def __init__(
        self,
        data: SeriesData,
        batch_size: int = 32,
        num_workers: int = 0,
        seed: int | None = None,
    ):
        super().__init__()
        self.data = data
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.seed = seed
        self.datasets = {split: WindowDataset(data, split) for split in ("train", "val", "test")}

    def _loader(self, split: str, shuffle: bool, drop_last: bool) -> DataLoader:
        dataset = self.datasets[split]
        if shuffle:
            generator = torch.Generator().manual_seed(self.seed) if self.seed is not None else None
            order = RandomSampler(dataset, generator=generator)
        else:
            order = SequentialSampler(dataset)
        return DataLoader(
            dataset,
            batch_sampler=BatchSampler(order, self.batch_size, drop_last=drop_last),
            collate_fn=keep_batch,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", True, len(self.datasets["train"]) >= self.batch_size)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", False, False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", False, False)
