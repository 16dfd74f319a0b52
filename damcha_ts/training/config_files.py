"""Run-config files: YAML with ``extends:``, per-horizon sections and ``section.key=value`` overrides,
merged into one raw three-section mapping that :class:`damcha_ts.training.config.RunConfig` then
validates.

A file may hold ``data``, ``model`` and ``training`` sections, ``extends:`` (a path, or a list of
paths, relative to the file, or shipped config names; the file's own keys win) and ``horizons:``
(``{96: {model: {...}}, 336: {...}}``: sections merged in when the run's horizon matches, because the
reference scripts tune some settings per horizon).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from damcha_ts.data.options import ProtocolOptions
from damcha_ts.errors import ConfigError
from damcha_ts.schema import (
    SHIPPED_ROOT,
    available_shipped,
    coerce,
    find_shipped,
    positive_int,
    read_yaml,
    reject_unknown_keys,
    yaml_number,
)

SECTIONS = ("data", "model", "training")
FILE_KEYS = (*SECTIONS, "extends", "horizons")


def available_configs() -> list[str]:
    """Names of the shipped run configs, e.g. ``"itransformer_damcha/etth1"``."""
    return available_shipped("config")


def find_config(name: str | Path) -> Path:
    """A config file from a path or a shipped name (``"itransformer_damcha/etth1"``)."""
    return find_shipped("config", name)


def official_config_name(model: str, dataset: str) -> str | None:
    """The shipped config for a model on a benchmark dataset, or None when there is none."""
    name = f"{model}/{dataset.lower()}"
    return name if (SHIPPED_ROOT / f"{name}.yaml").is_file() else None


def deep_merge(base: Mapping, update: Mapping) -> dict:
    """``base`` updated recursively by ``update`` (mappings merge, everything else replaces); copies."""
    merged = copy.deepcopy(dict(base))
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _read_yaml(path: Path, chain: tuple[Path, ...] = ()) -> dict:
    """Read one config file, following ``extends:`` (parents first, this file wins)."""
    path = path.resolve()
    if path in chain:
        loop = " -> ".join(str(p) for p in (*chain, path))
        raise ConfigError(f"config files extend each other in a loop: {loop}")
    raw = read_yaml(path) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a config must be a mapping with sections {', '.join(SECTIONS)}")
    reject_unknown_keys(raw, FILE_KEYS, "", source=path.name)
    return _with_parents(raw, path.parent, (*chain, path), where=str(path))


def _with_parents(raw: dict, folder: Path | None, chain: tuple[Path, ...], where: str) -> dict:
    """``raw`` merged over the files it ``extends`` (next to ``folder``, or shipped names)."""
    parents = raw.pop("extends", None) or []
    merged: dict = {}
    for parent in [parents] if isinstance(parents, (str, Path)) else parents:
        parent_path = folder / parent if folder is not None else Path(parent)
        if not parent_path.is_file():
            try:
                parent_path = find_config(parent)
            except ConfigError:
                raise ConfigError(f"{where}: extends {str(parent)!r}, which is neither a file next to it nor a "
                                  "shipped config") from None
        merged = deep_merge(merged, _read_yaml(parent_path, chain))
    return deep_merge(merged, raw)


def parse_override(text: str) -> tuple[tuple[str, str], Any]:
    """``"model.d_model=128"`` -> (("model", "d_model"), 128); values are YAML-parsed."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} must look like section.key=value")
    key, _, raw_value = text.partition("=")
    parts = [p for p in key.strip().split(".") if p]
    if len(parts) != 2 or parts[0] not in SECTIONS:
        raise ConfigError(
            f"override key {key.strip()!r} must be section.key with section in {', '.join(SECTIONS)}"
        )
    try:
        value = yaml.safe_load(raw_value) if raw_value.strip() else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"override {text!r}: value is not valid YAML: {exc}") from exc
    if isinstance(value, str) and yaml_number(value) is not value:
        value = float(value)  # YAML 1.1 reads "1e-4" as a string
    return (parts[0], parts[1]), value


def read_config(
    source: str | Path | Mapping,
    *,
    horizon: int | None = None,
    updates: Mapping[str, Mapping[str, Any]] | None = None,
    overrides: Sequence[str] = (),
) -> dict:
    """The raw ``{"data", "model", "training"}`` mapping of a file, shipped name or mapping, with its
    ``extends`` merged, the horizon's section applied, then ``updates`` (typed values from a caller:
    command-line flags, search samples), then ``overrides`` (``section.key=value`` text), which win.
    ``data.pred_len`` is set to the horizon (default: an overridden or updated pred_len, else the file's)."""
    if isinstance(source, Mapping):
        raw = copy.deepcopy(dict(source))
        reject_unknown_keys(raw, FILE_KEYS, "", source="config")
        raw = _with_parents(raw, None, (), where="config")
    else:
        raw = _read_yaml(find_config(source))
    changes = [((section, key), value) for section, values in (updates or {}).items() for key, value in values.items()]
    changes += [parse_override(text) for text in overrides]
    for section, _ in changes:
        reject_unknown_keys([section[0]], SECTIONS, "", source="config")
    horizons = raw.pop("horizons", None) or {}
    for section in SECTIONS:
        if not isinstance(raw.get(section) or {}, Mapping):
            raise ConfigError(f"config section {section!r} must be a mapping")
    config = {section: dict(raw.get(section) or {}) for section in SECTIONS}
    horizon = _run_horizon(horizon, changes, config["data"])
    per_horizon = {int(k): v for k, v in horizons.items()}
    if horizon in per_horizon:
        section_update = per_horizon[horizon] or {}
        reject_unknown_keys(section_update, SECTIONS, "", source=f"horizons.{horizon}")
        config = deep_merge(config, section_update)
    for (section, key), value in changes:
        config[section][key] = value
    config["data"]["pred_len"] = horizon
    return config


def _run_horizon(horizon: Any, changes: list, data: Mapping) -> int:
    if horizon is None:
        given = [value for place, value in changes if place == ("data", "pred_len")]
        horizon = given[-1] if given else data.get("pred_len", ProtocolOptions.pred_len)
    return positive_int(coerce(horizon, int, "horizon"), "horizon (data.pred_len)")
