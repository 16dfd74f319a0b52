"""GluonTS transformations our models need beyond the stock ones."""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
from gluonts.core.component import validated
from gluonts.dataset.common import DataEntry
from gluonts.dataset.field_names import FieldName
from gluonts.transform import MapTransformation

from damcha_ts.data.protocol import time_features
from damcha_ts.errors import DataError

TIME_MARKS = "time_marks"
# What the instance splitter calls the context part of TIME_MARKS: the module's input name.
PAST_TIME_MARKS = "past_" + TIME_MARKS


class RequireMultivariateTarget(MapTransformation):
    """Fail early, with a fix in the message, when an entry's target is not 2-D (N variates, T)."""

    @validated()
    def __init__(self) -> None:
        pass

    def map_transform(self, data: DataEntry, is_train: bool) -> DataEntry:
        target = np.asarray(data[FieldName.TARGET])
        if target.ndim != 2:
            item = data.get(FieldName.ITEM_ID)
            raise DataError(
                f"entry {item!r}: DAMCHAEstimator needs a 2-D target (N variates, T steps), got shape "
                f"{target.shape}. Build one multivariate entry with PandasDataset(wide_df, target=list_of_columns), "
                "or group univariate series with gluonts.dataset.multivariate_grouper.MultivariateGrouper."
            )
        return data


class AddTimeMarks(MapTransformation):
    """Add the time marks of the whole series as ``time_marks`` [M, T] (float32, read-only).

    The marks are ``damcha_ts.data.protocol.time_features`` of the entry's timestamps, exactly
    what the ``Forecaster`` and the benchmark loaders feed the model, so one set of weights gives
    the same forecast on every surface. The instance splitter then cuts ``past_time_marks`` [L, M]
    out of them like the target.

    GluonTS's cyclic training stream re-transforms the whole series for every window it samples,
    and computing calendar features for T timestamps costs milliseconds, so the result is cached
    per (start, length, frequency).

    Args:
        time_features_freq: frequency whose features are used; ``"h"`` (the benchmark convention:
            4 marks whatever the sampling rate) or None for the series' own frequency.
    """

    @validated()
    def __init__(self, time_features_freq: str | None = "h") -> None:
        self.time_features_freq = time_features_freq

    def map_transform(self, data: DataEntry, is_train: bool) -> DataEntry:
        start: pd.Period = data[FieldName.START]
        length = np.shape(data[FieldName.TARGET])[-1]
        data[TIME_MARKS] = series_time_marks(start, length, self.time_features_freq or start.freqstr)
        return data


@functools.lru_cache(maxsize=64)
def series_time_marks(start: pd.Period, length: int, time_features_freq: str) -> np.ndarray:
    """Marks [M, length] of ``length`` periods from ``start``; shared by callers, hence read-only."""
    timestamps = pd.period_range(start=start, periods=length, freq=start.freq).to_timestamp()
    marks, _ = time_features(timestamps, time_features_freq)
    marks = np.ascontiguousarray(marks.T, dtype=np.float32)
    marks.setflags(write=False)
    return marks
