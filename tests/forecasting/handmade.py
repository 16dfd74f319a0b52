"""Untrained models and hand-written data metadata for the forecasting tests (a module with its own
name: test modules here import it as ``handmade``)."""

from __future__ import annotations

import numpy as np
import torch

from damcha_ts.training.metadata import SeriesMeta

LOOKBACK, HORIZON = 24, 6
COLUMNS = ["a", "b", "OT"]
MEAN, SCALE = np.array([10.0, -3.0, 250.0]), np.array([2.0, 0.5, 40.0])
TINY = {"d_model": 16, "d_ff": 16, "n_heads": 2, "e_layers": 1, "dropout": 0.0, "generator_hidden": [8]}


def tiny_model(quantiles=None):
    from damcha_ts.models import build_model

    torch.manual_seed(5)
    config = {"name": "itransformer_damcha", "seq_len": LOOKBACK, "pred_len": HORIZON, **TINY}
    return build_model(config, quantiles=quantiles).eval()


def hand_meta(features: str = "M", **changes) -> SeriesMeta:
    values = dict(columns=list(COLUMNS), freq="h", features=features, seq_len=LOOKBACK, pred_len=HORIZON,
                  scaler_mean=list(MEAN), scaler_scale=list(SCALE), time_features_freq=None, name="hand")
    return SeriesMeta(**{**values, **changes})
