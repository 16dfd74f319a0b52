"""Windows, vectorised batches and the Lightning DataModule, checked against plain slicing."""

from __future__ import annotations

import lightning as L
import numpy as np
import pytest
import torch

from damcha_ts.data import ForecastDataModule, WindowDataset, prepare_series


@pytest.fixture(scope="module")
def etth1(benchmark_frame):
    return prepare_series(benchmark_frame("ETTh1"), seq_len=96, pred_len=48)


def test_items_equal_plain_slices_of_the_split(etth1):
    L_, H = 96, 48
    for split in ("train", "val", "test"):
        border1, _ = etth1.borders[split]
        windows = etth1.windows(split)
        assert isinstance(windows, WindowDataset) and len(windows) == etth1.window_count(split)
        for i in (0, 1, 777, len(windows) - 1):
            item = windows[i]
            start = border1 + i
            np.testing.assert_array_equal(item["x"].numpy(), etth1.scaled[start : start + L_])
            np.testing.assert_array_equal(item["y"].numpy(), etth1.scaled[start + L_ : start + L_ + H])
            np.testing.assert_array_equal(item["x_mark"].numpy(), etth1.marks[start : start + L_])
            np.testing.assert_array_equal(item["y_mark"].numpy(), etth1.marks[start + L_ : start + L_ + H])
        assert torch.equal(windows[-1]["y"], windows[len(windows) - 1]["y"])
        with pytest.raises(IndexError):
            windows[len(windows)]
    # The last test window ends exactly on the split's last row.
    last = etth1.windows("test")[len(etth1.windows("test")) - 1]
    np.testing.assert_array_equal(last["y"][-1].numpy(), etth1.scaled[etth1.borders["test"][1] - 1])


def test_batch_equals_stacked_items_and_is_contiguous(etth1):
    windows = etth1.windows("val")
    indices = torch.tensor([5, 0, 2784 - 48, 17])
    batch = windows.batch(indices)
    assert batch["x"].shape == (4, 96, 7) and batch["y"].shape == (4, 48, 7)
    assert batch["x_mark"].shape == (4, 96, 4) and batch["y_mark"].shape == (4, 48, 4)
    for key, tensor in batch.items():
        assert tensor.dtype == torch.float32 and tensor.is_contiguous()
        assert torch.equal(tensor, torch.stack([windows[int(i)][key] for i in indices]))


def test_loaders_cover_every_eval_window_and_drop_only_in_train(etth1):
    module = ForecastDataModule(etth1, batch_size=256, seed=0)
    for split, loader in (("val", module.val_dataloader()), ("test", module.test_dataloader())):
        batches = list(loader)
        n = etth1.window_count(split)
        assert sum(b["x"].shape[0] for b in batches) == n and batches[-1]["x"].shape[0] == n % 256
        x = torch.cat([b["x"] for b in batches])
        assert torch.equal(x, etth1.windows(split).batch(torch.arange(n))["x"])  # in order, none lost
    # Train: shuffled full batches of distinct windows, the last partial batch dropped.
    n_train = etth1.window_count("train")
    order = [index for batch in ForecastDataModule(etth1, batch_size=256, seed=0).train_dataloader().batch_sampler for index in batch]
    assert len(order) == 256 * (n_train // 256) and len(set(order)) == len(order) and order != sorted(order)
    train = list(module.train_dataloader())
    assert len(train) == n_train // 256 and all(b["x"].shape[0] == 256 for b in train)
    assert torch.equal(train[0]["y"], etth1.windows("train").batch(torch.tensor(order[:256]))["y"])


def test_seed_fixes_the_shuffle(etth1):
    first = lambda seed: next(iter(ForecastDataModule(etth1, batch_size=8, seed=seed).train_dataloader()))["x"]  # noqa: E731
    assert torch.equal(first(1), first(1))
    assert not torch.equal(first(1), first(2))


class _LastValueModel(L.LightningModule):
    """A one-weight model (forecast = w * last input value) that counts the windows it is tested on."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.tensor(0.5))
        self.tested_windows = 0
        self.test_squared_error = 0.0

    def forward(self, x, pred_len):
        return (self.weight * x[:, -1:, :]).expand(-1, pred_len, -1)

    def training_step(self, batch, batch_index):
        assert set(batch) == {"x", "y", "x_mark", "y_mark"}
        loss = torch.nn.functional.mse_loss(self(batch["x"], batch["y"].shape[1]), batch["y"])
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_index):
        self.log("val_loss", torch.nn.functional.mse_loss(self(batch["x"], batch["y"].shape[1]), batch["y"]))

    def test_step(self, batch, batch_index):
        self.tested_windows += batch["x"].shape[0]
        self.test_squared_error += float(((self(batch["x"], batch["y"].shape[1]) - batch["y"]) ** 2).sum())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_real_lightning_trainer_fits_and_tests_on_every_window(etth1, tmp_path):
    L.seed_everything(0, workers=True)
    module = ForecastDataModule(etth1, batch_size=128)
    model = _LastValueModel()
    trainer = L.Trainer(
        accelerator="cpu", max_epochs=1, limit_train_batches=5, limit_val_batches=2, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
    )
    trainer.fit(model, datamodule=module)
    assert trainer.global_step == 5 and model.weight.item() != 0.5
    trainer.test(model, datamodule=module, verbose=False)
    n_test = etth1.window_count("test")
    assert model.tested_windows == n_test == 2785 + 96 - 48
    # Same number from plain NumPy over all test windows.
    border1 = etth1.borders["test"][0]
    w = model.weight.item()
    expected = sum(
        float(((w * etth1.scaled[border1 + i + 95].astype(np.float64) - etth1.scaled[border1 + i + 96 : border1 + i + 144]) ** 2).sum())
        for i in range(n_test)
    )
    assert model.test_squared_error == pytest.approx(expected, rel=1e-5)


def test_a_train_split_shorter_than_one_batch_still_trains(etth1):
    """Dropping the last partial batch would leave no training batch at all: it is kept."""
    n_train = etth1.window_count("train")
    loader = ForecastDataModule(etth1, batch_size=n_train + 5, seed=0).train_dataloader()
    assert [b["x"].shape[0] for b in loader] == [n_train]
    assert len(ForecastDataModule(etth1, batch_size=n_train, seed=0).train_dataloader()) == 1
