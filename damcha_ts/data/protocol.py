"""The long-term forecasting protocol (docs/protocol.md §1.2-1.4) applied to one series.

``prepare_series`` turns any source into a ``SeriesData``: split borders with the lookback overlap,
a scaler fitted on the train rows only, ``M``/``S``/``MS`` column selection and ``timeF`` marks
(``data/panel.prepare`` applies it to each entity of a panel). Windows and batching live in
``windows.py`` (torch); this module needs only NumPy and pandas.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from damcha_ts.data.covariates import CovariateSeries, covariate_names, scale_covariates, take_covariates
from damcha_ts.data.frames import Source, frame_info, load_frame
from damcha_ts.data.time_index import check_freq
from damcha_ts.data.options import ProtocolOptions, check_features, check_size
from damcha_ts.data.registry import SPLIT_KINDS, get_spec
from damcha_ts.data.scaling import StandardScaler
from damcha_ts.errors import ConfigError, DataError, plain_repr
from damcha_ts.schema import positive_int

SPLITS = ("train", "val", "test")
# ETT borders count "months" of 30 days: 12 train, 4 val, 4 test (protocol.md §1.2).
_ETT_MONTH_HOURS = 30 * 24
# TSLib's "custom" split: 70 % train, 20 % test, the rest validation.
CUSTOM_FRACTIONS = (0.7, 0.1, 0.2)

Borders = dict[str, tuple[int, int]]


@dataclass
class SeriesData:
    """Everything a model or trainer needs about one prepared series.

    Row arrays cover every row the protocol uses (for ETT the first 20 months only).
    ``values`` [T, C] float64 raw scale and ``scaled`` [T, C] float32 z-scored with the train-only
    scaler hold the columns in model order: the target is last when present (always for S/MS);
    in S mode it is the only column. ``marks`` [T, M] float32 are the timeF features.
    ``borders[split] = (border1, border2)`` is the row range of that split, val/test starting
    ``seq_len`` rows before their boundary so the first window has a full lookback.
    """

    name: str
    columns: list[str]
    freq: str
    timestamps: pd.DatetimeIndex
    values: np.ndarray
    scaled: np.ndarray
    marks: np.ndarray
    scaler: StandardScaler
    borders: Borders
    seq_len: int
    pred_len: int
    features: str
    target: str | None = None
    # Benchmark name (None for user data), where the data came from, rows in the source.
    dataset: str | None = None
    source: str = ""
    total_rows: int = 0
    time_features_freq: str = "h"
    mark_names: list[str] = field(default_factory=list)
    # The last seq_len rows of the whole source, raw scale, in ``history_columns`` order: where a
    # forecast of what comes next starts. For ETT they lie past the protocol's rows; elsewhere they
    # end ``values``.
    latest_values: np.ndarray | None = None
    latest_timestamps: pd.DatetimeIndex | None = None
    # Past and future covariates (read, never forecast or scored), or None without.
    covariates: CovariateSeries | None = None
    # An entity's static covariates [S] float32, z-scored over the entities (data/panel.py), or None.
    static_covariates: np.ndarray | None = None

    def window_count(self, split: str) -> int:
        """Number of stride-1 windows in ``split``: rows - seq_len - pred_len + 1 (protocol §1.3);
        0 for the empty test split of ``test_size=0``."""
        border1, border2 = self.borders[_check_split(split)]
        return max(border2 - border1 - self.seq_len - self.pred_len + 1, 0)

    def windows(self, split: str):
        """The torch ``WindowDataset`` of ``split`` (imports torch)."""
        from damcha_ts.data.windows import WindowDataset

        return WindowDataset(self, split)

    @property
    def n_variates(self) -> int:
        return len(self.columns)

    @property
    def history_columns(self) -> list[str]:
        """The columns a forecast reads, in the order of every history table: the model columns,
        then the past and the future covariates."""
        return [*self.columns, *(self.covariates.columns if self.covariates is not None else [])]

    @property
    def latest(self) -> tuple[np.ndarray, pd.DatetimeIndex]:
        """(the last ``seq_len`` rows of ``history_columns``, their timestamps): where a forecast of
        what comes next starts (a panel has one per entity)."""
        return self.latest_values, self.latest_timestamps

    def covariate_counts(self) -> dict[str, int]:
        """How many covariates of each kind a model of this series reads (its config's counts)."""
        counts = {"past_covariates": 0, "future_covariates": 0}
        if self.covariates is not None:
            counts.update(self.covariates.counts())
        counts["static_covariates"] = 0 if self.static_covariates is None else len(self.static_covariates)
        return counts

    def training_extent(self) -> tuple[int, pd.Timestamp]:
        """(train rows, the latest timestamp training or validation read)."""
        (border1, border2), last_row = self.borders["train"], self.borders["val"][1]
        return border2 - border1, self.timestamps[max(last_row, border2) - 1]

    def history_rows(self) -> np.ndarray:
        """Raw values [T, len(history_columns)] of every used row (``values`` and the covariates')."""
        if self.covariates is None:
            return self.values
        return np.concatenate([self.values, self.covariates.values], axis=1)

    @property
    def target_only(self) -> bool:
        """Whether models forecast only the target (the last column; ``MS``), see :func:`scored_slice`."""
        return scored_slice(self.features) != slice(None)


def _check_split(split: str) -> str:
    if split not in SPLITS:
        raise ConfigError(f"split must be one of {SPLITS}, got {split!r}")
    return split


def split_borders(kind_or_spec, n_rows: int, seq_len: int) -> Borders:
    """Row ranges [border1, border2) of train/val/test (protocol.md §1.2).

    ``kind_or_spec`` is ``"ett_hour"``, ``"ett_minute"``, ``"custom"`` (70/10/20), a sequence of
    three fractions (train, val, test) split as TSLib does (train and test rounded down, val the
    rest), or a mapping of explicit borders (returned as given after validation).
    """
    if isinstance(kind_or_spec, Mapping):
        borders = {split: tuple(int(b) for b in kind_or_spec[split]) for split in SPLITS if split in kind_or_spec}
        missing = [s for s in SPLITS if s not in borders]
        if missing:
            raise ConfigError(f"split: explicit borders need keys {SPLITS}, missing {missing}")
        for split, (border1, border2) in borders.items():
            if not 0 <= border1 < border2 <= n_rows:
                raise ConfigError(f"split: {split} borders ({border1}, {border2}) must satisfy 0 <= border1 < border2 <= {n_rows} rows")
        return borders
    if isinstance(kind_or_spec, str):
        if kind_or_spec not in SPLIT_KINDS:
            raise ConfigError(f"split must be one of {SPLIT_KINDS}, three fractions or a dict of borders, got {kind_or_spec!r}")
        if kind_or_spec in ("ett_hour", "ett_minute"):
            per_month = _ETT_MONTH_HOURS * (4 if kind_or_spec == "ett_minute" else 1)
            ends = (12 * per_month, 16 * per_month, 20 * per_month)
            if n_rows < ends[2]:
                raise DataError(f"the {kind_or_spec} split needs {ends[2]} rows (20 months), the data has {n_rows}")
            return {"train": (0, ends[0]), "val": (ends[0] - seq_len, ends[1]), "test": (ends[1] - seq_len, ends[2])}
        fractions = CUSTOM_FRACTIONS
    else:
        fractions = tuple(float(f) for f in kind_or_spec)
        if len(fractions) != 3 or min(fractions) <= 0 or abs(sum(fractions) - 1.0) > 1e-9:
            raise ConfigError(f"split fractions must be three positive numbers (train, val, test) summing to 1, got {kind_or_spec!r}")
    n_train = int(n_rows * fractions[0])
    n_test = int(n_rows * fractions[2])
    n_val = n_rows - n_train - n_test
    return {
        "train": (0, n_train),
        "val": (max(n_train - seq_len, 0), n_train + n_val),
        "test": (max(n_rows - n_test - seq_len, 0), n_rows),
    }


def default_tails(kind: str, n_rows: int) -> tuple[int, int]:
    """(validation rows, test rows) of a split kind's default tails: 4 months each for ETT, else
    TSLib's custom 70/10/20 of ``n_rows`` (test rounded down, validation the rest)."""
    if kind in ("ett_hour", "ett_minute"):
        month = _ETT_MONTH_HOURS * (4 if kind == "ett_minute" else 1)
        return 4 * month, 4 * month
    n_train, n_test = int(n_rows * CUSTOM_FRACTIONS[0]), int(n_rows * CUSTOM_FRACTIONS[2])
    return n_rows - n_train - n_test, n_test


def _tail_rows(name: str, size, n_rows: int) -> int:
    size = check_size(name, size)
    return size if isinstance(size, int) else int(n_rows * size)


def size_borders(
    n_rows: int, seq_len: int, pred_len: int, *, val_size=None, test_size=None, default: str = "custom"
) -> Borders:
    """Borders from the sizes of the validation and test tails (``val_size`` / ``test_size``: rows,
    or fractions of ``n_rows`` rounded down); the train split is every row before them, and a size
    left None is that of the ``default`` split kind (:func:`default_tails`). Every row is used (for
    ETT too). ``test_size=0`` leaves the test split empty, ``(n_rows, n_rows)``; val and test start
    ``seq_len`` rows before their boundary, as in :func:`split_borders`. ConfigError naming the
    argument when a split would hold no window."""
    default_val, default_test = default_tails(default, n_rows)
    n_val = default_val if val_size is None else _tail_rows("val_size", val_size, n_rows)
    n_test = default_test if test_size is None else _tail_rows("test_size", test_size, n_rows)
    given = ", ".join(f"{k}={plain_repr(v)}" for k, v in (("val_size", val_size), ("test_size", test_size)) if v is not None)
    if n_val < pred_len:
        raise ConfigError(
            f"val_size={plain_repr(val_size)} gives {n_val} validation rows; early stopping needs at least one window, "
            f"pred_len = {pred_len} rows after the lookback (the data has {n_rows} rows)"
        )
    if 0 < n_test < pred_len:
        raise ConfigError(
            f"test_size={plain_repr(test_size)} gives {n_test} test rows; one test window needs pred_len = {pred_len} "
            "rows after the lookback (or test_size=0 for no test split)"
        )
    n_train = n_rows - n_val - n_test
    if n_train < seq_len + pred_len:
        raise ConfigError(
            f"{given}: {n_val} validation and {n_test} test rows leave {max(n_train, 0)} of the {n_rows} rows for training; "
            f"one training window needs seq_len + pred_len = {seq_len + pred_len}. Use smaller val_size/test_size, "
            "shorter windows or more data"
        )
    boundary = n_train + n_val
    return {
        "train": (0, n_train),
        "val": (n_train - seq_len, boundary),
        "test": (boundary - seq_len, n_rows) if n_test else (n_rows, n_rows),
    }


def train_on_train_and_val(series: SeriesData) -> SeriesData:
    """``series`` with its train split extended over the validation rows, and the scaler refitted
    on them: what ``Forecaster.fit(..., refit=True)`` retrains on (the test split is unchanged).
    A panel's: :meth:`damcha_ts.data.panel.Panel.train_on_train_and_val`."""
    border1, _ = series.borders["train"]
    return resplit(series, {**series.borders, "train": (border1, series.borders["val"][1])})


def selection_split(series: SeriesData, inner_val_rows: int) -> SeriesData:
    """``series`` cut for choosing a model on its validation rows (``Forecaster("auto")``): those
    rows become the test split, scored once per candidate; the train rows split again into a
    train part and an inner validation tail of ``inner_val_rows`` (early stopping); the scaler is
    refitted on the new train rows. The test rows of ``series`` lie outside every split.
    A panel's: :meth:`damcha_ts.data.panel.Panel.selection_split`."""
    (train_start, train_end), (_, val_end), seq_len = series.borders["train"], series.borders["val"], series.seq_len
    inner_end = train_end - int(inner_val_rows)
    if inner_val_rows < series.pred_len or inner_end - train_start < seq_len + series.pred_len:
        raise ConfigError(f"{series.name}: its {train_end - train_start} train rows hold no inner validation tail of "
                          f"{inner_val_rows} rows (at least pred_len = {series.pred_len}) after a training window of "
                          f"seq_len + pred_len = {seq_len + series.pred_len} rows; use a shorter lookback or more data")
    return resplit(series, {"train": (train_start, inner_end), "val": (inner_end - seq_len, train_end),
                            "test": (train_end - seq_len, val_end)})


def resplit(series: SeriesData, borders: Borders) -> SeriesData:
    """``series`` with new split ``borders``, its scaler (and its covariates') fitted again on the new
    train rows and its values scaled with it."""
    scaler = StandardScaler.fit(series.values[borders["train"][0] : borders["train"][1]])
    covariates = None if series.covariates is None else series.covariates.rescaled(borders["train"])
    return dataclasses.replace(series, borders=borders, scaler=scaler, covariates=covariates,
                               scaled=scaler.transform(series.values).astype(np.float32))


def time_features(timestamps: pd.DatetimeIndex, freq: str = "h") -> tuple[np.ndarray, list[str]]:
    """timeF marks [T, M] float32 and their names, from GluonTS's time features.

    For ``freq="h"`` (the benchmark convention for every dataset, protocol.md §1.4) these are
    HourOfDay, DayOfWeek, DayOfMonth and DayOfYear, each scaled to [-0.5, 0.5]. Other
    frequencies use GluonTS's choice for that frequency (e.g. 5 features for minutes, 3 for days;
    none for yearly data: marks [T, 0]).
    """
    from gluonts.time_feature import (
        day_of_month,
        day_of_week,
        day_of_year,
        hour_of_day,
        time_features_from_frequency_str,
    )

    check_freq(freq, "time_features_freq")
    if pd.tseries.frequencies.to_offset(freq) == pd.tseries.frequencies.to_offset("h"):
        # Pinned explicitly: the benchmark numbers depend on exactly these four.
        functions = [hour_of_day, day_of_week, day_of_month, day_of_year]
    else:
        try:
            functions = time_features_from_frequency_str(freq)
        except (RuntimeError, ValueError) as exc:
            raise ConfigError(f"time_features_freq={freq!r}: GluonTS has no time features for it") from exc
    if not functions:  # yearly data: a calendar position within the period does not exist
        return np.zeros((len(timestamps), 0), dtype=np.float32), []
    marks = np.stack([np.asarray(fn(timestamps), dtype=np.float64) for fn in functions], axis=1)
    return marks.astype(np.float32), [fn.__name__ for fn in functions]


def check_arguments(seq_len=None, pred_len=None, features=None) -> None:
    """ConfigError naming the argument unless the lookback and horizon are positive integers and
    ``features`` a mode (those given: None is not checked)."""
    for argument, value in (("seq_len", seq_len), ("pred_len", pred_len)):
        if value is not None:
            positive_int(value, argument)
    if features is not None:
        check_features(features)


def prepare_series(
    source: Source,
    *,
    seq_len: int = ProtocolOptions.seq_len, pred_len: int = ProtocolOptions.pred_len,
    features: str = ProtocolOptions.features,
    target: str = ProtocolOptions.target,
    time_features_freq: str | None = ProtocolOptions.time_features_freq,
    split=None,
    val_size=None, test_size=None,
    fill: str | None = None,
    allow_irregular: bool = False,
    past_covariates: Sequence[str] | None = None,
    future_covariates: Sequence[str] | None = None,
    **load_options,
) -> SeriesData:
    """Load ``source`` as one series and apply the protocol (each entity of a panel goes through
    here; :func:`damcha_ts.data.panel.prepare` decides one series or many).

    ``source``, ``fill``, ``allow_irregular`` and ``load_options`` (``path``, ``time_col``, ``freq``,
    ``layout``...) go to ``load_frame``: ``fill`` opts in to filling NaN/inf values, and
    ``allow_irregular`` keeps duplicate or irregular timestamps of user data. ``split`` is None
    (the benchmark's split kind; 70/10/20 for user data), a split kind, three fractions or
    explicit borders (see ``split_borders``); or ``val_size`` / ``test_size`` give the validation
    and test tails instead (rows, or fractions of the rows; ``test_size=0``: no test split, train
    on everything but the validation tail; see ``size_borders``), over every row of the source
    (an ETT benchmark included). ``features``: ``M`` all columns in and out; ``MS`` all in, target
    out; ``S`` target only. The target column is moved last whenever it exists (TSLib's column
    order); S and MS require it.
    ``time_features_freq`` is ``"h"`` (benchmark convention: 4 marks for every dataset) or None to
    use the data's own frequency, or any pandas frequency alias.
    ``past_covariates`` / ``future_covariates`` name columns the model reads and never forecasts or
    scores (see :mod:`damcha_ts.data.covariates`): scaled with the train rows' statistics, kept in
    ``SeriesData.covariates``, out of ``columns``.
    """
    check_arguments(seq_len, pred_len, features)
    names = covariate_names(past_covariates, future_covariates)  # checked before the data is read
    frame = load_frame(source, fill=fill, allow_irregular=allow_irregular, **load_options)
    info = frame_info(frame)
    spec = get_spec(info["dataset"]) if info.get("dataset") else None
    covariate_frame = (take_covariates(frame, names, target if features != "M" else None, info["name"])
                       if names["past"] or names["future"] else None)
    named = set(covariate_frame.columns) if covariate_frame is not None else set()
    columns = _model_columns([c for c in frame.columns if c not in named], features, target, info["name"])
    borders = _series_borders(info["name"], len(frame), seq_len, pred_len, spec.split if spec else "custom",
                              split, val_size, test_size)
    marks_freq = time_features_freq if time_features_freq is not None else info["freq"]
    return SeriesData(name=info["name"], columns=columns, freq=info["freq"], borders=borders, seq_len=int(seq_len),
                      pred_len=int(pred_len), features=features, target=target if target in columns else None,
                      dataset=info.get("dataset"), source=str(info.get("source", "")), total_rows=len(frame),
                      **_rows(frame, columns, borders, seq_len, marks_freq, covariate_frame, names))


def _rows(frame: pd.DataFrame, columns: list[str], borders: Borders, seq_len: int, marks_freq: str,
          covariate_frame: pd.DataFrame | None, names) -> dict:
    """The row arrays of :class:`SeriesData` (raw, scaled with the train rows' scaler, marks,
    covariates, the latest rows) of the rows the borders use."""
    used = max(border2 for _, border2 in borders.values())  # ETT never uses its last ~4 months
    # Row-major whatever the input's layout, so that wide, long and NumPy inputs give bit-identical windows.
    values = np.ascontiguousarray(frame[columns].iloc[:used].to_numpy(dtype=np.float64))
    scaler = StandardScaler.fit(values[borders["train"][0] : borders["train"][1]])
    timestamps = frame.index[:used]
    marks, mark_names = time_features(timestamps, marks_freq)
    covariates = None if covariate_frame is None else scale_covariates(covariate_frame, names, borders["train"], used)
    history_columns = [*columns, *(covariates.columns if covariates is not None else [])]
    return dict(timestamps=timestamps, values=values, scaled=scaler.transform(values).astype(np.float32), marks=marks,
                scaler=scaler, time_features_freq=marks_freq, mark_names=mark_names, covariates=covariates,
                latest_values=np.ascontiguousarray(frame[history_columns].iloc[-seq_len:].to_numpy(dtype=np.float64)),
                latest_timestamps=frame.index[-seq_len:])


def _series_borders(name: str, n_rows: int, seq_len: int, pred_len: int, default_kind: str, split, val_size,
                    test_size) -> Borders:
    """The borders :func:`prepare_series` splits ``n_rows`` rows by: ``split`` (or ``default_kind``),
    or the ``val_size`` / ``test_size`` tails; DataError naming series ``name`` when a split is too
    short for one window (an empty test split of ``test_size=0`` is fine)."""
    if val_size is None and test_size is None:
        borders = split_borders(split if split is not None else default_kind, n_rows, seq_len)
    elif split is not None:
        raise ConfigError(f"split={split!r} and val_size/test_size both given: choose one way to split the data")
    else:
        borders = size_borders(n_rows, seq_len, pred_len, val_size=val_size, test_size=test_size, default=default_kind)
    minimum = seq_len + pred_len
    for split_name, (border1, border2) in borders.items():
        if border1 == border2 and split_name == "test" and test_size is not None:
            continue  # test_size=0: no test split
        if border2 - border1 < minimum:
            raise DataError(
                f"{name}: the {split_name} split has {border2 - border1} rows (rows {border1}-{border2}); "
                f"one window needs at least seq_len + pred_len = {minimum}. Use shorter windows, more data "
                "or different split fractions"
            )
    return borders


def _model_columns(available: list[str], features: str, target: str, name: str) -> list[str]:
    if target not in available:
        if features == "M":
            return available
        close = difflib.get_close_matches(target, available, n=3)
        hint = f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
        raise ConfigError(
            f"{name}: target column {target!r} (needed for features={features!r}) not found.{hint} "
            f"Columns are {available}; pass target=..."
        )
    if features == "S":
        return [target]
    return [c for c in available if c != target] + [target]


def scored_slice(features: str) -> slice:
    """The model columns a forecast is scored on and returned for: in ``MS`` mode the target alone,
    which :func:`_model_columns` puts last; every column otherwise. The one place of this rule."""
    return slice(-1, None) if features == "MS" else slice(None)


__all__ = [
    "SeriesData", "StandardScaler", "prepare_series", "size_borders", "split_borders", "time_features",
    "train_on_train_and_val"
]
