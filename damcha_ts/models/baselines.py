"""Baselines as models: the floor every forecast must beat, usable wherever a model name is.

``naive`` repeats the last value, ``seasonal_naive`` the last season (``season_length`` rows; when
not given, the data's frequency decides it at fit: ``forecasting/estimator.py``), ``window_mean``
the mean of the lookback, ``drift`` extends the line from the lookback's first to its last value
(Hyndman & Athanasopoulos, FPP3 §5.2). These four learn nothing (no parameters: fitting only scores
them on validation). ``linear`` is NLinear (Zeng et al., AAAI 2023): one linear map from the
lookback to the horizon shared by every variate, applied to the series minus its last value.

Each takes ``x`` [B, L, N] in the panel's scale; the per-column affine scaler commutes with all of
them, so their forecasts are the same on the original scale. Time marks and covariates are read
by none (their counts are accepted, so data with covariates fits).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from damcha_ts.data.options import ProtocolOptions
from damcha_ts.errors import ConfigError
from damcha_ts.models.base import COVARIATE_KINDS, Covariates, ForecastModel
from damcha_ts.models.validation import check_counts, check_positive_ints


@dataclass(kw_only=True)
class BaselineConfig:
    """Lookback and horizon, and the covariate counts the data sets (read by no baseline)."""

    seq_len: int = ProtocolOptions.seq_len
    pred_len: int = ProtocolOptions.pred_len
    past_covariates: int = field(default=0, metadata={"since": 2})
    future_covariates: int = field(default=0, metadata={"since": 2})
    static_covariates: int = field(default=0, metadata={"since": 2})

    def __post_init__(self) -> None:
        check_positive_ints(self, ("seq_len", "pred_len"))
        check_counts(self, COVARIATE_KINDS)


@dataclass(kw_only=True)
class NaiveConfig(BaselineConfig):
    """``naive``: the last value."""


@dataclass(kw_only=True)
class SeasonalNaiveConfig(BaselineConfig):
    """``seasonal_naive``: the last ``season_length`` values, repeated (None: the data's season, set at fit)."""

    season_length: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.season_length is not None:
            check_positive_ints(self, ("season_length",))
            if self.season_length > self.seq_len:
                raise ConfigError(f"season_length={self.season_length} is longer than the lookback seq_len={self.seq_len}: "
                                  "a seasonal naive forecast repeats the lookback's last season; give a lookback of at "
                                  "least one season")


@dataclass(kw_only=True)
class WindowMeanConfig(BaselineConfig):
    """``window_mean``: the mean of the lookback."""


@dataclass(kw_only=True)
class DriftConfig(BaselineConfig):
    """``drift``: the lookback's first-to-last slope, continued."""


@dataclass(kw_only=True)
class LinearConfig(BaselineConfig):
    """``linear`` (NLinear): a trained map from the lookback, minus its last value, to the horizon."""


class Baseline(ForecastModel):
    """A fixed rule; ``forward(x [B, L, N]) -> [B, pred_len, N]``. Subclasses write ``_rule``."""

    family: str

    def __init__(self, config: BaselineConfig):
        super().__init__()
        self.config = config

    @property
    def name(self) -> str:
        return self.family

    def _forecast(self, x: Tensor, x_mark: Tensor | None, need_weights: bool, covariates: Covariates | None = None):
        return self._rule(x, self.config.pred_len).contiguous(), {}

    def _rule(self, x: Tensor, horizon: int) -> Tensor:
        raise NotImplementedError


class Naive(Baseline):
    family = "naive"

    def _rule(self, x: Tensor, horizon: int) -> Tensor:
        return x[:, -1:, :].expand(-1, horizon, -1)


class SeasonalNaive(Baseline):
    family = "seasonal_naive"

    def _rule(self, x: Tensor, horizon: int) -> Tensor:
        season = self.config.season_length
        if season is None:
            raise ConfigError("seasonal_naive has no season_length: give one, or fit it on data with a frequency")
        # Step h (0-based) repeats lookback row L - m + (h mod m).
        return x[:, x.shape[1] - season + torch.arange(horizon, device=x.device) % season, :]


class WindowMean(Baseline):
    family = "window_mean"

    def _rule(self, x: Tensor, horizon: int) -> Tensor:
        return x.mean(dim=1, keepdim=True).expand(-1, horizon, -1)


class Drift(Baseline):
    family = "drift"

    def _rule(self, x: Tensor, horizon: int) -> Tensor:
        slope = (x[:, -1:, :] - x[:, :1, :]) / max(x.shape[1] - 1, 1)
        steps = torch.arange(1, horizon + 1, dtype=x.dtype, device=x.device).view(1, -1, 1)
        return x[:, -1:, :] + steps * slope


class Linear(ForecastModel):
    """NLinear; ``forward(x [B, L, N]) -> [B, pred_len, N]``: ``W (x - x_L) + b + x_L`` per variate, W shared."""

    def __init__(self, config: LinearConfig):
        super().__init__()
        self.config = config
        self.projection = nn.Linear(config.seq_len, config.pred_len)

    @property
    def name(self) -> str:
        return "linear"

    def _forecast(self, x: Tensor, x_mark: Tensor | None, need_weights: bool, covariates: Covariates | None = None):
        last = x[:, -1:, :]
        return self.projection((x - last).transpose(1, 2)).transpose(1, 2) + last, {}
