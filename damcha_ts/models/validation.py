"""Checks for config fields; each error names the field and the accepted values."""

from __future__ import annotations

from damcha_ts.errors import ConfigError, plain_repr


def check_choice(name: str, value: object, choices: tuple) -> None:
    if value not in choices:
        raise ConfigError(f"{name}={plain_repr(value)}; expected one of {choices}")


def check_positive_ints(config: object, names: tuple[str, ...]) -> None:
    for name in names:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name}={plain_repr(value)}; expected a positive integer")


def check_counts(config: object, kinds: tuple[str, ...]) -> None:
    """``<kind>_covariates`` fields are integers >= 0."""
    for kind in kinds:
        value = getattr(config, f"{kind}_covariates")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"{kind}_covariates={plain_repr(value)}; expected an integer >= 0 (how many {kind} covariates)")


def check_bools(config: object, names: tuple[str, ...]) -> None:
    for name in names:
        if not isinstance(getattr(config, name), bool):
            raise ConfigError(f"{name}={getattr(config, name)!r}; expected True or False")


def check_dropout(value: object, name: str = "dropout") -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ConfigError(f"{name}={plain_repr(value)}; expected a number in [0, 1)")


def check_heads(d_model: int, n_heads: int) -> int:
    """-> head width d_model // n_heads."""
    if n_heads < 1 or d_model % n_heads != 0:
        raise ConfigError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
    return d_model // n_heads


def check_lr_scale(key: str, scale: float | None, applies: bool, needs: str) -> None:
    """A learning-rate multiplier (``compact_lr_scale``, ``gate_lr_scale``) is None, or > 0 with
    parameters to act on (``applies``); ``needs`` says which model setting gives them."""
    if scale is None:
        return
    if not applies:
        raise ConfigError(f"{key}={scale} needs a DAMCHA model with {needs}")
    if not scale > 0:
        raise ConfigError(f"{key}={scale}; expected a number > 0")
