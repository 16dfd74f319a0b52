"""A model size that follows the data: what ``Forecaster.fit`` builds for user data when the size
keys are not given.

The benchmark configs carry the reference scripts' sizes (TSLib's defaults: ``d_model=512``,
``d_ff=2048``, a metric generator of widths (256, 512)), tuned for tens of thousands of windows. On a
7-variate weekly series of 966 rows those sizes make 22.4M parameters (DAMCHA-iTransformer) and 33.2M
(DAMCHA-Gateformer) for 485 training windows. :func:`data_sized` scales them with the data instead:

- ``d_model``: the step of ``D_MODELS`` = (16, 32, 64, 128, 256, 512) nearest (on a log scale) to
  ``sqrt(variates x training windows)``, the number of (variate, window) training examples. The
  training windows are ``train rows - lookback - horizon + 1``: that is where lookback and horizon
  enter. ETTh1 under its protocol (7 variates, 8,449 windows at L = H = 96) gets 256, the width of its
  official config; Weather (21 variates) and larger sets get 512; the weekly series above gets 64.
- ``d_ff = d_model`` (as the official iTransformer ETT and Weather configs have it);
- ``e_layers``: 1 up to ``d_model`` 32, else 2;
- ``n_heads``: ``d_model // 16`` (head width 16), at most 8 and at least 1, a divisor of ``d_model``;
- ``generator_hidden`` (DAMCHA's metric generator): ``(d_model // 2, d_model)``, at least 8 wide,
  the default (256, 512) scaled from ``d_model`` 512.

Keys the caller gives are kept and the others follow them (``d_model=128`` alone also gives
``d_ff=128``, 8 heads, generator (64, 128)); a given ``n_heads`` rounds a chosen ``d_model`` up to a
multiple of it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

#: The model-size keys :func:`data_sized` chooses (a Forecaster given all of them is never resized).
SIZE_KEYS = ("d_model", "d_ff", "e_layers", "n_heads", "generator_hidden")
#: The widths ``d_model`` is chosen from.
D_MODELS = (16, 32, 64, 128, 256, 512)


def sized_width(n_variates: int, train_windows: int) -> int:
    """The ``d_model`` of :func:`data_sized`: the step of ``D_MODELS`` nearest to sqrt(variates x windows)."""
    examples = max(1, int(n_variates)) * max(1, int(train_windows))
    target = 0.5 * math.log2(examples)
    return min(D_MODELS, key=lambda width: (abs(math.log2(width) - target), width))


def data_sized(n_variates: int, train_windows: int, given: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``d_model``, ``d_ff``, ``e_layers``, ``n_heads`` and ``generator_hidden`` for a series of
    ``n_variates`` model columns and ``train_windows`` training windows (rule: module docstring).
    Keys in ``given`` come back as given; the chosen ones follow them."""
    given = dict(given or {})
    sized: dict[str, Any] = {}
    d_model = int(given["d_model"]) if "d_model" in given else sized_width(n_variates, train_windows)
    if "d_model" not in given and "n_heads" in given:
        heads = max(1, int(given["n_heads"]))
        d_model = -(-d_model // heads) * heads  # the nearest multiple of the given heads, upwards
    sized["d_model"] = d_model
    sized["d_ff"] = d_model
    sized["e_layers"] = 1 if d_model <= 32 else 2
    sized["n_heads"] = next(h for h in (8, 4, 2, 1) if h <= max(1, d_model // 16) and d_model % h == 0)
    sized["generator_hidden"] = (max(8, d_model // 2), max(8, d_model))
    return {key: given.get(key, sized[key]) for key in SIZE_KEYS}


def size_for_series(series, given: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """:func:`data_sized` for a prepared :class:`damcha_ts.data.SeriesData` (its model columns and
    training windows)."""
    return data_sized(series.n_variates, series.window_count("train"), given)


def decided_by_data(series, given: Mapping[str, Any], accepted: Sequence[str], *, size: bool = True) -> dict[str, Any]:
    """The model keys of a family (``accepted``) that the prepared ``series`` decides because
    ``given`` leaves them open: the size keys (when the family has them and ``size``: user data)
    and a seasonal model's ``season_length`` (its frequency's season). Empty: the config stands."""
    from damcha_ts.data.time_index import season_length_of

    decided: dict[str, Any] = {}
    if size and set(SIZE_KEYS) <= set(accepted) and not all(key in given for key in SIZE_KEYS):
        decided.update(size_for_series(series, given))
    if "season_length" in accepted and given.get("season_length") is None:
        decided["season_length"] = season_length_of(series.freq)
    return decided
