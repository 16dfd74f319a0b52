"""Covariates of a prepared series: columns a model reads and never forecasts or scores (issue 20).

- **past** covariates are observed up to the forecast origin (a sensor, the weather measured): a
  window reads their lookback rows;
- **future** covariates are known in advance (calendars, prices, promotions): a window reads their
  lookback *and* horizon rows, and a forecast needs their values over the horizon.

They are scaled like the targets, with statistics of the train rows only, and kept apart from the
target columns, so that no metric ever counts them. Static covariates belong to entities (one value
per series) and come with many-entity data.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from damcha_ts.data.scaling import StandardScaler
from damcha_ts.errors import ConfigError

KINDS = ("past", "future")


@dataclass
class CovariateSeries:
    """The covariate columns of a series, in the rows of its ``SeriesData`` (``values`` [T, ...])."""

    past_columns: list[str]
    future_columns: list[str]
    values: np.ndarray  # [T, P + F] float64, raw scale: the past columns, then the future ones
    past: np.ndarray | None  # [T, P] float32, z-scored with the train rows' statistics; None without
    future: np.ndarray | None  # [T, F] float32, likewise
    scaler: StandardScaler  # of the past columns, then the future ones

    @property
    def columns(self) -> list[str]:
        return [*self.past_columns, *self.future_columns]

    def counts(self) -> dict[str, int]:
        """The model config's covariate counts: ``{"past_covariates": P, "future_covariates": F}``."""
        return {"past_covariates": len(self.past_columns), "future_covariates": len(self.future_columns)}

    def rescaled(self, train_rows: tuple[int, int]) -> CovariateSeries:
        """The same columns scaled with the statistics of other train rows (a refit's)."""
        return _scaled(self.values, self.past_columns, self.future_columns, train_rows)

    def with_scaler(self, scaler: StandardScaler) -> CovariateSeries:
        """The same columns scaled with ``scaler`` (one fitted on several entities' train rows)."""
        return _scaled(self.values, self.past_columns, self.future_columns, None, scaler)


def covariate_names(past: Sequence[str] | str | None, future: Sequence[str] | str | None) -> dict[str, list[str]]:
    """The two column lists, checked: names are strings, none is given twice or as both kinds."""
    names = {}
    for kind, given in zip(KINDS, (past, future)):
        if given is None:
            given = []
        elif isinstance(given, str):
            given = [given]  # one name
        elif not all(isinstance(name, str) for name in given):
            raise ConfigError(f"{kind}_covariates={given!r}: expected a list of column names")
        names[kind] = list(given)
    both = [name for name in names["past"] if name in names["future"]]
    for kind in KINDS:
        repeated = sorted({name for name in names[kind] if names[kind].count(name) > 1})
        if repeated:
            raise ConfigError(f"{kind}_covariates names {repeated} twice")
    if both:
        raise ConfigError(f"columns {both} are named as both past and future covariates; a column is one or the other")
    return names


def covariate_settings(past: Any, future: Any, static: Any = None) -> dict:
    """``{"past_covariates": [...], "future_covariates": [...], "static_covariates": [...]}`` (kinds
    given only), the data settings of the ``Forecaster`` keywords and the ``--past-covariates``
    flags alike. Static covariates are per entity (``entity_col=``, data/entities.py)."""
    names = covariate_names(past, future)
    settings = {f"{kind}_covariates": names[kind] for kind in KINDS if names[kind]}
    if static:
        statics = [static] if isinstance(static, str) else list(static)
        clash = [name for name in statics if name in names["past"] or name in names["future"]]
        if clash or not all(isinstance(name, str) for name in statics):
            raise ConfigError(f"static_covariates={static!r}: expected column names that are not also past or "
                              "future covariates")
        settings["static_covariates"] = statics
    return settings


def take_covariates(frame: pd.DataFrame, names: dict[str, list[str]], target: str | None, label: str) -> pd.DataFrame:
    """The covariate columns of ``frame`` (past, then future), refused when missing or the target."""
    available = [str(c) for c in frame.columns]
    wanted = [*names["past"], *names["future"]]
    for kind in KINDS:
        missing = [name for name in names[kind] if name not in available]
        if missing:
            close = {m: difflib.get_close_matches(m, available, n=1) for m in missing}
            hints = "".join(f"; did you mean {c[0]!r} for {m!r}?" for m, c in close.items() if c)
            raise ConfigError(f"{label}: {kind}_covariates {missing} are not columns{hints} (columns: {available})")
    if target is not None and target in wanted:
        raise ConfigError(f"{label}: the target {target!r} cannot also be a covariate")
    if len(wanted) == len(available):
        raise ConfigError(f"{label}: every column is a covariate; at least one must be a variate to forecast")
    return frame[wanted]


def scale_covariates(covariates: pd.DataFrame, names: dict[str, list[str]], train_rows: tuple[int, int],
                     used_rows: int) -> CovariateSeries:
    """z-score the covariate columns with the statistics of ``train_rows`` (as the targets are)."""
    values = np.ascontiguousarray(covariates.iloc[:used_rows].to_numpy(dtype=np.float64))
    return _scaled(values, names["past"], names["future"], train_rows)


def _scaled(values: np.ndarray, past: Sequence[str], future: Sequence[str], train_rows: tuple[int, int] | None,
            scaler: StandardScaler | None = None) -> CovariateSeries:
    if scaler is None:
        scaler = StandardScaler.fit(values[train_rows[0] : train_rows[1]])
    scaled = scaler.transform(values).astype(np.float32)
    n_past = len(past)
    return CovariateSeries(past_columns=list(past), future_columns=list(future), values=values, scaler=scaler,
                           past=np.ascontiguousarray(scaled[:, :n_past]) if n_past else None,
                           future=np.ascontiguousarray(scaled[:, n_past:]) if future else None)
