"""The timestamps of a frame: where a row lives for error messages (:class:`Place`), duplicate,
backwards and irregular stamps, and the frequency (given and checked against the stamps, or inferred)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from damcha_ts.errors import ConfigError, DataError
from damcha_ts.schema import positive_int


class Place:
    """Where a row lives, for error messages: ``file.csv row 12 (line 14)`` or ``DataFrame row 12``."""

    def __init__(self, label: str, header_lines: int | None = None):
        self.label = label
        self.header_lines = header_lines

    def row(self, i: int) -> str:
        if self.header_lines is None:
            return f"row {i}"
        return f"row {i} (line {i + 1 + self.header_lines})"


def irregularity(index: pd.DatetimeIndex, place: Place) -> str | None:
    """Sentences naming the first duplicate, backwards and off-step timestamps; None if regular."""
    problems = []
    duplicated = np.flatnonzero(index.duplicated())
    if duplicated.size:
        i = int(duplicated[0])
        problems.append(f"duplicate timestamp {index[i]} at {place.row(i)} ({duplicated.size} duplicates in all)")
    steps = np.diff(index.asi8)
    backwards = np.flatnonzero(steps < 0)
    if backwards.size:
        i = int(backwards[0]) + 1
        problems.append(f"timestamps go backwards at {place.row(i)} ({index[i]} after {index[i - 1]})")
    if not problems and (len(index) < 3 or pd.infer_freq(index) is not None):
        return None
    forward = steps[steps > 0]
    if forward.size:
        usual = _modal_step(forward)
        off = np.flatnonzero((steps > 0) & (steps != usual))
        if off.size:
            i = int(off[0]) + 1
            problems.append(
                f"irregular step at {place.row(i)} ({index[i]} comes {pd.Timedelta(int(steps[i - 1]))} after "
                f"{index[i - 1]}; the usual step is {pd.Timedelta(int(usual))}; {off.size} irregular steps in all)"
            )
    return f"{place.label}: " + "; ".join(problems) if problems else None


def _modal_step(steps: np.ndarray) -> int:
    values, counts = np.unique(steps, return_counts=True)
    return int(values[np.argmax(counts)])


def check_freq(freq: str, argument: str) -> None:
    """A ConfigError naming ``argument`` unless ``freq`` is a pandas frequency string ("h", "15min")."""
    try:
        pd.tseries.frequencies.to_offset(freq)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{argument}={freq!r} is not a pandas frequency string (e.g. 'h', '15min', 'D'): {exc}") from exc


def check_steps_match(index: pd.DatetimeIndex, freq: str, place: Place) -> None:
    """A given ``freq`` must be the one the timestamps step by: the forecast's timestamps and time
    features follow it (``freq="W"`` means Sundays; Monday data is ``"W-MON"``)."""
    if len(index) < 2:
        return
    offset = pd.tseries.frequencies.to_offset(freq)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pd.errors.PerformanceWarning)  # calendar offsets apply per element
        expected = index[:-1] + offset
    bad = np.flatnonzero(expected != index[1:])
    if bad.size:
        i = int(bad[0]) + 1
        raise DataError(
            f"{place.label}: freq={freq!r} does not match the timestamps: {place.row(i)} is {index[i]}, "
            f"but one {freq!r} step after {index[i - 1]} is {expected[i - 1]}. Leave freq out to infer it"
        )


def inferred_freq(index: pd.DatetimeIndex, place: Place) -> str:
    if len(index) >= 3:
        inferred = pd.infer_freq(index)
        if inferred is not None:
            return inferred
    if len(index) < 2:
        raise DataError(f"{place.label}: {len(index)} timestamp(s) are too few to tell the frequency; pass freq=...")
    # Irregular but allowed: the most common step stands for the frequency.
    return pd.tseries.frequencies.to_offset(pd.Timedelta(_modal_step(np.diff(index.asi8)))).freqstr


def season_length_of(freq: str | None, season_length: int | None = None) -> int:
    """The season ``m`` of a frequency (MASE's seasonal naive scale, the ``seasonal_naive`` model):
    ``season_length`` when given (checked: ConfigError naming it), else gluonts'
    ``get_seasonality(freq)`` (24 hourly, 48 half-hourly, 5 business-daily, 12 monthly, 4 quarterly;
    1 daily, weekly and yearly, the M4 convention); 1 without one."""
    if season_length is not None:
        return positive_int(season_length, "season_length", "a positive integer (rows per season) or None")
    if not freq:
        return 1
    from gluonts.time_feature import get_seasonality

    with warnings.catch_warnings():  # pandas' deprecated aliases ('H', 'T') still name the same season
        warnings.simplefilter("ignore", FutureWarning)
        try:
            return int(get_seasonality(str(freq)))
        except ValueError:  # not a pandas offset (a custom index): no known season
            return 1
