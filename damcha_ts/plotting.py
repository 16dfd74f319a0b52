"""Forecast plots: history, forecast and (when known) truth, one panel per variate.

matplotlib is an optional dependency (``pip install damcha-ts[plot]``), imported only here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from damcha_ts.errors import ConfigError
from damcha_ts.files import save_figure
from damcha_ts.forecasting.intervals import with_intervals


def plot_forecast(
    history: pd.DataFrame,
    forecast: pd.DataFrame,
    truth: pd.DataFrame | None = None,
    *,
    variates: Sequence[str] | None = None,
    max_variates: int = 4,
    path: str | Path | None = None,
    ax=None,
    title: str | None = None,
    bands: dict | None = None,
):
    """Draw wide frames (DatetimeIndex rows, one column per variate) and return the Figure.

    Args:
        history: the input rows, [L, N].
        forecast: the predicted rows, [H, N'] (N' may be the target only).
        truth: the actual future rows, same index and columns as ``forecast``, or None.
        variates: columns to draw (default: the first ``max_variates`` forecast columns; the
            target, being last, is always included).
        path: save the figure there (PNG, PDF, SVG... by extension) and close it.
        ax: draw a single variate into this Axes instead of a new figure.
        bands: ``{level: (lo, hi)}`` wide frames like ``forecast``: prediction intervals, shaded
            around the forecast (wider levels lighter).
    """
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("plotting needs matplotlib: pip install 'damcha-ts[plot]'") from exc

    variates = _chosen_variates(list(forecast.columns), variates, max_variates)
    if ax is not None:
        if len(variates) != 1:
            raise ConfigError("ax= draws one variate; pass variates=[name]")
        figure, axes = ax.figure, [ax]
    else:
        figure, axes = plt.subplots(len(variates), 1, figsize=(10, 2.4 * len(variates)), sharex=True, squeeze=False)
        axes = list(axes[:, 0])
    for axis, name in zip(axes, variates):
        _draw_variate(axis, name, history, forecast, truth, bands or {})
    axes[0].legend(loc="upper left", fontsize="small", ncol=3)
    if title:
        axes[0].set_title(title)
    figure.autofmt_xdate()
    figure.tight_layout()
    if path is not None:
        save_figure(figure, path, dpi=120)
        if ax is None:
            plt.close(figure)
    return figure


def _chosen_variates(columns: list, variates: Sequence[str] | None, max_variates: int) -> list:
    """The forecast columns to draw: ``variates`` checked, or the first ``max_variates`` with the
    target (the last column) always among them."""
    if variates is None:
        variates = columns[: max_variates - 1] + [columns[-1]] if len(columns) > max_variates else columns
    unknown = [v for v in variates if v not in columns]
    if unknown:
        raise ConfigError(f"variates {unknown} are not forecast columns; choose from {columns}")
    return variates


def _draw_variate(axis, name: str, history: pd.DataFrame, forecast: pd.DataFrame, truth: pd.DataFrame | None,
                  bands: dict) -> None:
    """One variate's history, truth, interval bands (wider levels lighter) and forecast into ``axis``."""
    if name in history.columns:
        axis.plot(history.index, history[name], color="0.35", linewidth=1.0, label="history")
    if truth is not None and name in truth.columns:
        axis.plot(truth.index, truth[name], color="tab:green", linewidth=1.0, label="truth")
    for rank, (level, (lo, hi)) in enumerate(sorted(bands.items(), reverse=True)):
        axis.fill_between(forecast.index, lo[name].to_numpy(), hi[name].to_numpy(), color="tab:blue",
                          alpha=0.12 + 0.12 * rank, linewidth=0, label=f"{float(level):g}% interval")
    axis.plot(forecast.index, forecast[name], color="tab:blue", linewidth=1.4, label="forecast")
    axis.axvline(forecast.index[0], color="0.6", linestyle=":", linewidth=0.8)
    axis.set_ylabel(str(name))


def plot_prediction(
    predictor,
    values: np.ndarray,
    timestamps: pd.DatetimeIndex,
    *,
    truth: Any = None,
    variates: Sequence[str] | None = None,
    history_steps: int | None = None,
    path: str | Path | None = None,
    ax=None,
    title: str | None = None,
    levels: tuple[float, ...] = (),
    future: np.ndarray | None = None,
):
    """Plot a history ([L, K] raw values of ``meta.history_columns``: model columns, then covariates;
    and timestamps), the :class:`~damcha_ts.forecasting.Predictor`'s forecast after it (``future``
    [H, F]: the future covariates' values) and, when given, the ``truth`` (a wide frame indexed by
    the forecast timestamps, or an array ``[H, C_out]``); ``levels`` (percentages, as
    ``check_levels`` gave them) shade the predictor's calibrated intervals. Covariates are not drawn."""
    forecast = with_intervals(predictor, predictor.forecast_after(values, timestamps, future), levels)
    columns = list(predictor.meta.columns)
    history = pd.DataFrame(np.asarray(values)[:, : len(columns)], index=timestamps, columns=columns)
    point = pd.DataFrame(forecast.point, index=forecast.timestamps, columns=forecast.columns)
    if truth is not None and not isinstance(truth, pd.DataFrame):
        truth = pd.DataFrame(np.asarray(truth, dtype=np.float64), index=forecast.timestamps, columns=forecast.columns)
    if history_steps is not None:
        history = history.iloc[-history_steps:]
    bands = {a: tuple(pd.DataFrame(b, index=forecast.timestamps, columns=forecast.columns) for b in pair)
             for a, pair in (forecast.intervals or {}).items()}
    return plot_forecast(history, point, truth, variates=variates, path=path, ax=ax, title=title, bands=bands)
