"""A grid file's ``targets:`` section (see grid.py's docstring for its keys): what LEADERBOARD.md
judges the rows against, a protocol-parity check and goal tables. No run config depends on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from damcha_ts.errors import ConfigError
from damcha_ts.leaderboard.grid_values import dataset_list, nonempty_text, positive_number, row_name
from damcha_ts.leaderboard.published import load_published
from damcha_ts.models.registry import FAMILIES
from damcha_ts.schema import reject_unknown_keys

TARGET_KEYS = ("parity", "goals")
PARITY_KEYS = ("title", "model", "published", "tolerance", "datasets")
GOAL_KEYS = ("title", "baseline", "published", "columns", "note")
GOAL_COLUMN_KEYS = ("header", "against", "datasets", "at_least")
GOAL_AGAINST = ("baseline", "published")  # a goal column compares with the baseline row or the published Avg


@dataclass(frozen=True)
class ParityTarget:
    """The protocol-parity check: our ``model`` row's Avg MSE within ``tolerance`` of the published one."""

    title: str
    model: str
    published: str
    tolerance: float
    datasets: tuple[str, ...] = ()  # listed even before they have run


@dataclass(frozen=True)
class GoalColumn:
    """One column of a goal table: Avg MSE ≤ the baseline row's (or the published Avg) on ``datasets``;
    with ``at_least`` the column is met on that many of them, else it gives one verdict per dataset."""

    header: str
    against: str  # one of GOAL_AGAINST
    datasets: tuple[str, ...]
    at_least: int | None = None


@dataclass(frozen=True)
class GoalTable:
    """Verdicts for every DAMCHA row compared with the ``baseline`` MHA row (main row first)."""

    title: str
    baseline: str
    published: str
    columns: tuple[GoalColumn, ...]
    note: str = ""


@dataclass(frozen=True)
class ReportTargets:
    """A grid's ``targets:`` section: what the report judges the rows against (nothing by default)."""

    parity: ParityTarget | None = None
    goals: tuple[GoalTable, ...] = ()


def parse_targets(value, path: Path) -> ReportTargets:
    """The optional ``targets:`` section of the grid file ``path``: nothing in it reaches a run config."""
    if value is None:
        return ReportTargets()
    targets = _section(value, TARGET_KEYS, (), "targets", path)
    goals = targets.get("goals", [])
    if not isinstance(goals, list):
        raise ConfigError(f"{path}: targets.goals: expected a list of goal tables, got {goals!r}")
    return ReportTargets(
        parity=_parse_parity(targets["parity"], path) if "parity" in targets else None,
        goals=tuple(_parse_goal(goal, f"targets.goals[{index}]", path) for index, goal in enumerate(goals)),
    )


def _parse_parity(value, path: Path) -> ParityTarget:
    where = "targets.parity"
    entry = _section(value, PARITY_KEYS, ("title", "model", "published", "tolerance"), where, path)
    return ParityTarget(
        title=nonempty_text(entry["title"], f"{path}: {where}.title"),
        model=row_name(entry["model"], f"{path}: {where}.model"),
        published=_published_model(entry["published"], f"{path}: {where}.published"),
        tolerance=positive_number(entry["tolerance"], f"{path}: {where}.tolerance"),
        datasets=dataset_list(entry.get("datasets", []), f"{path}: {where}.datasets", allow_empty=True),
    )


def _parse_goal(value, where: str, path: Path) -> GoalTable:
    entry = _section(value, GOAL_KEYS, ("title", "baseline", "published", "columns"), where, path)
    mha_rows = [spec.mha_and_damcha[0] for spec in FAMILIES.values()]
    if entry["baseline"] not in mha_rows:
        raise ConfigError(f"{path}: {where}.baseline: {entry['baseline']!r} is not one of {mha_rows} "
                          "(the MHA row each DAMCHA row of its architecture is judged against)")
    columns = entry["columns"]
    if not isinstance(columns, list) or not columns:
        raise ConfigError(f"{path}: {where}.columns: expected a non-empty list of columns, got {columns!r}")
    return GoalTable(
        title=nonempty_text(entry["title"], f"{path}: {where}.title"),
        baseline=entry["baseline"],
        published=_published_model(entry["published"], f"{path}: {where}.published"),
        columns=tuple(_parse_goal_column(column, f"{where}.columns[{k}]", path) for k, column in enumerate(columns)),
        note=nonempty_text(entry.get("note", ""), f"{path}: {where}.note", allow_empty=True),
    )


def _parse_goal_column(value, where: str, path: Path) -> GoalColumn:
    entry = _section(value, GOAL_COLUMN_KEYS, ("header", "against", "datasets"), where, path)
    if entry["against"] not in GOAL_AGAINST:
        raise ConfigError(f"{path}: {where}.against: {entry['against']!r} is not one of {list(GOAL_AGAINST)}")
    datasets = dataset_list(entry["datasets"], f"{path}: {where}.datasets")
    at_least = entry.get("at_least")
    if at_least is not None and (not isinstance(at_least, int) or isinstance(at_least, bool)
                                 or not 1 <= at_least <= len(datasets)):
        raise ConfigError(f"{path}: {where}.at_least: expected an integer from 1 to {len(datasets)} "
                          f"(the column's number of datasets), got {at_least!r}")
    return GoalColumn(nonempty_text(entry["header"], f"{path}: {where}.header"), entry["against"], datasets, at_least)


def _section(value, keys: tuple[str, ...], required: tuple[str, ...], where: str, path: Path) -> dict:
    """A mapping of the ``targets:`` section with only ``keys``, among them every ``required`` one."""
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: {where}: expected a mapping, got {value!r}")
    reject_unknown_keys(value, keys, where, source=str(path))
    for key in required:
        if key not in value:
            raise ConfigError(f"{path}: {where}: missing required key {key!r}")
    return value


def _published_model(value, where: str) -> str:
    """A model with published numbers (published.json)."""
    models = load_published().models
    if value not in models:
        raise ConfigError(f"{where}: {value!r} is not a published model ({', '.join(models)})")
    return value
