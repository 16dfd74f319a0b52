"""GluonTS transformations our models need beyond the stock ones."""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
from gluonts.core.component import validated
from gluonts.dataset.common import DataEntry
from gluonts.dataset.field_names import FieldName
from gluonts.transform import MapTransformation
from gluonts.transform.feature import MissingValueImputation

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


class RequireCovariates(MapTransformation):
    """Each covariate field the model reads is in every entry with its shape (GluonTS's
    ``describe_inputs`` check, done per entry with a message naming entry and field):
    ``feat_dynamic_real`` [F, >= T] in training and [F, >= T + H] for a forecast (its horizon values
    are known in advance), ``past_feat_dynamic_real`` [P, >= T], ``feat_static_real`` [S]; finite
    values over those steps.

    Args:
        counts: field -> number of covariates the model reads.
        prediction_length: H.
    """

    @validated()
    def __init__(self, counts: dict[str, int], prediction_length: int) -> None:
        self.counts = counts
        self.prediction_length = prediction_length

    def map_transform(self, data: DataEntry, is_train: bool) -> DataEntry:
        item = data.get(FieldName.ITEM_ID)
        steps = np.shape(data[FieldName.TARGET])[-1]
        for field, count in self.counts.items():
            if field not in data:
                raise DataError(f"entry {item!r} has no {field!r}; the model was trained with {count} of them "
                                f"(give every entry its {field})")
            values = np.asarray(data[field], dtype=np.float64)
            if field == FieldName.FEAT_STATIC_REAL:
                if values.shape != (count,):
                    raise DataError(f"entry {item!r}: {field} has shape {values.shape}; expected ({count},)")
            else:
                forecast = field == FieldName.FEAT_DYNAMIC_REAL and not is_train
                length = steps + (self.prediction_length if forecast else 0)
                if values.ndim != 2 or values.shape[0] != count or values.shape[1] < length:
                    what = (f"the {steps} steps of the target and the {self.prediction_length} forecast steps "
                            "(known in advance)") if forecast else f"the {steps} steps of the target"
                    raise DataError(f"entry {item!r}: {field} has shape {values.shape}; expected ({count}, {length}): "
                                    f"one row per covariate, one column for each of {what}")
            values = values[..., :length] if values.ndim == 2 else values
            if not np.isfinite(values).all():
                raise DataError(f"entry {item!r}: {field} holds NaN/inf values ({int((~np.isfinite(values)).sum())})")
        return data


class ForwardFillImputation(MissingValueImputation):
    """Each variate's missing values take its last observed value; a leading gap takes the mean of
    its observed values (not the first one, which would put a training window's own future into
    its context), a variate with no value at all 0. Works on [N, T] targets (GluonTS's own
    LastValueImputation expects [T]). GluonTS's default writes 0 on the data's scale, an outlier
    that would also spoil the model's per-window normalisation."""

    @validated()
    def __init__(self) -> None:
        pass

    def __call__(self, values: np.ndarray) -> np.ndarray:
        by_time = pd.DataFrame(np.atleast_2d(values).T)  # [T, N]
        filled = by_time.ffill().fillna(by_time.mean()).fillna(0.0).to_numpy().T
        return filled.reshape(values.shape).astype(values.dtype, copy=False)


class FillContextPadding(MapTransformation):
    """A context shorter than the model's lookback is left-padded by the instance splitter with
    zeros. The target's padded rows take the first real row's values instead (``past_is_pad`` marks
    them), so padding looks like a flat history, not like a drop to 0; the time marks of those rows
    are the calendar features of their (earlier) timestamps, as for any other row.

    Args:
        time_marks: whether entries carry ``past_time_marks`` (models that read marks).
        time_features_freq: as for :class:`AddTimeMarks`.
    """

    @validated()
    def __init__(self, time_marks: bool = True, time_features_freq: str | None = "h") -> None:
        self.time_marks = time_marks
        self.time_features_freq = time_features_freq

    def map_transform(self, data: DataEntry, is_train: bool) -> DataEntry:
        pad = np.asarray(data["past_" + FieldName.IS_PAD], dtype=bool)  # [L]; padding comes first
        if not pad.any() or pad.all():
            return data
        target = np.array(data["past_target"])  # [L, N]
        target[pad] = target[int(np.argmin(pad))]
        data["past_target"] = target
        if self.time_marks:
            first: pd.Period = data[FieldName.FORECAST_START] - len(pad)
            marks = series_time_marks(first, len(pad), self.time_features_freq or first.freqstr)  # [M, L]
            data[PAST_TIME_MARKS] = np.ascontiguousarray(marks.T)
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
