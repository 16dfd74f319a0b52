"""Lightning DataModule serving the windows of a prepared series (benchmark or user data)."""

from __future__ import annotations

import lightning as L
import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, SequentialSampler

from damcha_ts.data.panel import Panel
from damcha_ts.data.windows import keep_batch


class ForecastDataModule(L.LightningDataModule):
    """Train/val/test loaders of dict batches ``{"x", "y", "x_mark", "y_mark"}`` (see WindowDataset).

    Batches are gathered by ``WindowDataset.__getitems__`` from a ``BatchSampler``: one indexing
    call per batch. Train shuffles and, like the iTransformer reference, drops its last partial
    batch -- unless that batch is all there is (a short series with fewer training windows than
    ``batch_size``), where dropping it would leave nothing to train on. Val and test never drop a
    window (protocol.md §1.5), so test metrics cover every window; under DDP each validation window
    goes to exactly one rank. ``seed`` fixes the train
    shuffling order independently of the global RNG; None follows torch's global RNG
    (``lightning.seed_everything``).
    """

    def __init__(
        self,
        data: Panel,
        batch_size: int = 32,
        num_workers: int = 0,
        seed: int | None = None,
    ):
        super().__init__()
        self.data = data
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.seed = seed
        # data.windows: the windows of every entity of the panel (data/panel.py).
        self.datasets = {split: data.windows(split) for split in ("train", "val", "test")}

    def _loader(self, split: str, shuffle: bool, drop_last: bool) -> DataLoader:
        dataset = self.datasets[split]
        if shuffle:
            generator = torch.Generator().manual_seed(self.seed) if self.seed is not None else None
            order = RandomSampler(dataset, generator=generator)
        else:
            order = SequentialSampler(dataset)
        return DataLoader(dataset, batch_sampler=BatchSampler(order, self.batch_size, drop_last=drop_last),
                          collate_fn=keep_batch, num_workers=self.num_workers, persistent_workers=self.num_workers > 0)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", True, len(self.datasets["train"]) >= self.batch_size)

    def val_dataloader(self) -> DataLoader:
        trainer = self.trainer
        if trainer is not None and trainer.world_size > 1:
            return self._sharded_loader("val", trainer.world_size, trainer.global_rank)
        return self._loader("val", False, False)

    def _sharded_loader(self, split: str, world_size: int, rank: int) -> DataLoader:
        """Under DDP: every ``world_size``-th window from ``rank``, no window twice. Lightning's own
        DistributedSampler pads the split to a multiple of the world size by repeating windows,
        which would count those twice in the summed val_loss."""
        from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler

        dataset = self.datasets[split]
        shard = UnrepeatedDistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False)
        return DataLoader(dataset, sampler=shard, batch_size=self.batch_size, collate_fn=keep_batch,
                          num_workers=self.num_workers, persistent_workers=self.num_workers > 0)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", False, False)
