"""Shared fixtures of the training tests: real ETTh1, tiny models, one torch thread."""

from __future__ import annotations


import pytest

# A model small enough that an epoch of a few batches takes well under a second on one core,
# with every part of the real architecture (DAMCHA generator, 2 layers, marks, dropout).
TINY_MODEL = ["model.d_model=16", "model.d_ff=16", "model.n_heads=2", "model.generator_hidden=[8]"]
QUIET = {"enable_progress_bar": False, "enable_model_summary": False, "log_every_n_steps": 1}




@pytest.fixture(scope="session")
def etth1_frame(data_root):
    """The real ETTh1 file as a wide frame (read once per session)."""
    from damcha_ts.data import load_frame

    return load_frame("ETTh1", download=False)


@pytest.fixture(scope="session")
def tiny_config(data_root):
    """``tiny_config(*overrides, horizon=24, model=..., dataset=...)``: an official config, tiny model."""
    from damcha_ts.training import load_run_config

    def make(*extra: str, horizon: int = 24, model: str = "itransformer_damcha", dataset: str = "etth1") -> dict:
        return load_run_config(f"{model}/{dataset}", horizon=horizon, overrides=[*TINY_MODEL, *extra])

    return make


@pytest.fixture(scope="session")
def quiet() -> dict:
    """trainer_kwargs without progress bar or model summary."""
    return dict(QUIET)
