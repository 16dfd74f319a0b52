"""A leaderboard grid (datasets x models x horizons x seeds), read from ``configs/leaderboard/*.yaml``.

Example (every key is listed here; unknown keys are errors)::

    name: ett
    description: ETT rows of LEADERBOARD.md
    horizons: [96, 192, 336, 720]
    seeds: [2021]                        # default seed list of the neural models
    naive: [repeat_last, window_mean]    # deterministic baselines, one cell per dataset x horizon
    overrides: []                        # "a.b=value" applied to every neural cell (after the model's)
    trainer: {}                          # extra lightning.Trainer arguments (e.g. limit_train_batches)
    compare_with: []                     # rows of other grids that this grid's rows are drawn
                                         # beside in the report's ablation figures
    models:
      - name: itransformer_mha           # a damcha_ts.models name (or a variant: VARIANTS); its run config defaults to
        config: configs/{model}/{dataset_lower}.yaml   # this template ({dataset} works too)
      - name: itransformer_damcha        # "model.name=<name>" is applied to the config first
        seeds: [2023]                    # this model's default seeds (instead of the grid's)
      - name: itransformer_damcha        # an ablation row: same model, its own label in the CSV
        label: itransformer_damcha_static
        overrides: [model.static_metric=true]
    datasets:
      ETTh1:
        seeds: {itransformer_mha: [2021, 2022, 2023]}   # per-model seed lists for this dataset
                                                        # (win over the model's and the grid's)
      ETTm1: {}
    targets:                             # what LEADERBOARD.md judges the rows against (optional;
      parity:                            # no run config depends on it)
        title: "Protocol parity: our MHA Avg MSE vs the published one"
        model: itransformer_mha          # our row ...
        published: iTransformer          # ... against this published column's Avg MSE
        tolerance: 0.015                 # |difference| that still counts as parity
        datasets: [ETTh1, ETTm1]         # listed even before they have run
      goals:                             # tables of verdicts, one row per DAMCHA row of the
        - title: "Targets for DAMCHA"    # architecture whose MHA row is the baseline
          baseline: itransformer_mha
          published: iTransformer
          columns:
            - header: "Avg MSE ≤ MHA on ≥ 1 of 2 ETT datasets"
              against: baseline          # or: published
              datasets: [ETTh1, ETTm1]
              at_least: 1                # met with at least this many; without it: one verdict
                                         # per dataset
          note: "What the verdicts mean."   # printed under the table

Relative paths (``config``) are resolved against the project root: the folder holding the
``configs/`` directory the grid file lives in (or the grid file's own folder if it is elsewhere);
a path found only among the shipped configs (``configs/itransformer_mha/etth1.yaml``) is taken from there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from damcha_ts.baselines import METHODS as NAIVE_METHODS
from damcha_ts.errors import ConfigError
from damcha_ts.leaderboard.grid_values import canonical_dataset, int_list, optional_mapping, row_name, str_list
from damcha_ts.leaderboard.paths import safe_name
from damcha_ts.leaderboard.targets import ReportTargets, parse_targets
from damcha_ts.models.registry import (
    BASELINE_NAMES,
    MODEL_NAMES,
    VARIANT_NAMES,
    VARIANTS,
    known_model_name,
    resolve_variant,
)
from damcha_ts.schema import SHIPPED_ROOT, load_shipped, reject_unknown_keys

# Naive forecasts are deterministic; their rows carry this seed so every row has one.
NAIVE_SEED = 0

GRID_KEYS = ("name", "description", "horizons", "seeds", "naive", "overrides", "trainer", "compare_with", "models",
             "datasets", "targets")
MODEL_KEYS = ("name", "label", "config", "overrides", "seeds")
# The shipped per-dataset run configs (written for the training code): configs/<model>/<dataset>.yaml
DEFAULT_MODEL_CONFIG = "configs/{model}/{dataset_lower}.yaml"
# The baselines share one config per dataset; a grid entry names its baseline by a model.name override.
BASELINE_CONFIG = "configs/baselines/{dataset_lower}.yaml"
DATASET_KEYS = ("seeds",)


@dataclass(frozen=True)
class ModelEntry:
    """One model column of the grid. ``label`` is what the CSV and the report call it."""

    name: str
    label: str
    config: str = DEFAULT_MODEL_CONFIG  # path template with {model}, {dataset}, {dataset_lower}
    overrides: tuple[str, ...] = ()
    seeds: tuple[int, ...] | None = None  # None: the grid's seeds


@dataclass(frozen=True)
class Cell:
    """One run of the grid. ``model`` is the label; naive cells have ``naive_method`` set."""

    dataset: str
    model: str
    horizon: int
    seed: int
    config_path: Path | None = None
    overrides: tuple[str, ...] = ()
    naive_method: str | None = None

    @property
    def is_naive(self) -> bool:
        return self.naive_method is not None

    def describe(self) -> str:
        return f"{self.dataset} {self.model} H={self.horizon} seed={self.seed}"


@dataclass(frozen=True)
class LeaderboardGrid:
    """A validated grid file (see the module docstring); ``cells()`` expands it into runs."""

    name: str
    path: Path
    project_root: Path
    horizons: tuple[int, ...]
    seeds: tuple[int, ...]
    naive: tuple[str, ...]
    overrides: tuple[str, ...]
    models: tuple[ModelEntry, ...]
    datasets: tuple[str, ...]
    dataset_seeds: dict[str, dict[str, tuple[int, ...]]] = field(default_factory=dict)
    trainer: dict = field(default_factory=dict)
    description: str = ""
    compare_with: tuple[str, ...] = ()
    targets: ReportTargets = field(default_factory=ReportTargets)

    @property
    def relative_path(self) -> str:
        """The grid file relative to the project root (absolute if it lives elsewhere)."""
        try:
            return str(self.path.relative_to(self.project_root))
        except ValueError:
            return str(self.path)

    def seeds_for(self, dataset: str, model_label: str) -> tuple[int, ...]:
        """Per-dataset list if given, else the model's own list, else the grid's."""
        if model_label in self.dataset_seeds.get(dataset, {}):
            return self.dataset_seeds[dataset][model_label]
        model = next((m for m in self.models if m.label == model_label), None)
        return model.seeds if model is not None and model.seeds is not None else self.seeds

    def config_path(self, model: ModelEntry, dataset: str) -> Path:
        """The model's run config for ``dataset``: relative paths from the project root, falling back
        to the shipped ``configs/`` (so a grid kept outside the project can use the default template)."""
        relative = model.config.format(model=model.name, dataset=dataset, dataset_lower=dataset.lower())
        path = Path(relative)
        if path.is_absolute():
            return path
        local, shipped = self.project_root / path, SHIPPED_ROOT.parent / path
        return shipped if not local.is_file() and shipped.is_file() else local

    @property
    def model_labels(self) -> tuple[str, ...]:
        """Every model row this grid produces: the naive methods, then the neural models."""
        return (*self.naive, *(m.label for m in self.models))

    def cells(self, only_datasets: tuple[str, ...] = (), only_models: tuple[str, ...] = ()) -> list[Cell]:
        """Every cell, in run order: first the naive cells of every dataset (seconds each), then per
        dataset the neural cells by seed rank, horizon and model, so that a run in pieces
        (``--max-cells``) fills whole first-seed rows before it starts on further seeds. ``only_*``
        keep just those datasets / model labels (naive method names count as labels)."""
        datasets = [d for d in self.datasets if not only_datasets or d in only_datasets]
        naive = [m for m in self.naive if not only_models or m in only_models]
        models = [m for m in self.models if not only_models or m.label in only_models]
        cells = [
            Cell(dataset, method, horizon, NAIVE_SEED, naive_method=method)
            for dataset in datasets
            for horizon in self.horizons
            for method in naive
        ]
        for dataset in datasets:
            seed_lists = {m.label: self.seeds_for(dataset, m.label) for m in models}
            for rank in range(max(map(len, seed_lists.values()), default=0)):
                for horizon in self.horizons:
                    for model in models:
                        if rank < len(seed_lists[model.label]):
                            overrides = (f"model.name={model.name}", *model.overrides, *self.overrides)
                            cells.append(Cell(dataset, model.label, horizon, seed_lists[model.label][rank],
                                              config_path=self.config_path(model, dataset), overrides=overrides))
        return cells

    def command(self, dataset: str | None = None) -> str:
        """The command that (re)produces this grid's rows, relative to the project root."""
        only = f" --only-dataset {dataset}" if dataset else ""
        return f"damcha-ts leaderboard --config {self.relative_path}{only}"


# ---------------------------------------------------------------------------- reading a grid file
def load_grid(path: str | Path) -> LeaderboardGrid:
    """Read and validate a grid file (a path, or a shipped name: ``ett``, ``leaderboard/ett``);
    dataset names are canonicalised through the data registry."""
    path, raw = _read_grid_file(path)
    models = _parse_models(raw["models"], path)
    datasets, dataset_seeds = _parse_datasets(raw["datasets"], [m.label for m in models], path)
    return LeaderboardGrid(
        name=safe_name(raw["name"], f"{path}: name"),
        path=path,
        project_root=_project_root(path),
        horizons=int_list(raw["horizons"], f"{path}: horizons", minimum=1),
        seeds=int_list(raw.get("seeds", [2021]), f"{path}: seeds"),
        naive=_parse_naive(raw.get("naive"), path),
        overrides=str_list(raw.get("overrides"), f"{path}: overrides"),
        models=models,
        datasets=datasets,
        dataset_seeds=dataset_seeds,
        trainer=optional_mapping(raw.get("trainer"), f"{path}: trainer"),
        description=str(raw.get("description", "")),
        compare_with=_parse_compare_with(raw.get("compare_with"), path),
        targets=parse_targets(raw.get("targets"), path),
    )


def combined_targets(grids: Sequence[LeaderboardGrid]) -> ReportTargets:
    """The targets of every grid a report covers: one parity check (grids that give one must give
    the same) and every distinct goal table, in grid order."""
    parity, owner, goals = None, None, []
    for grid in grids:
        if grid.targets.parity is not None:
            if parity is not None and grid.targets.parity != parity:
                raise ConfigError(f"{grid.path}: targets.parity differs from the one in {owner}; "
                                  "a report has one parity check")
            parity, owner = grid.targets.parity, grid.path
        goals += [goal for goal in grid.targets.goals if goal not in goals]
    return ReportTargets(parity, tuple(goals))


def _read_grid_file(name: str | Path) -> tuple[Path, dict]:
    """The grid file and its top-level mapping, with every key known and the required ones there."""
    path, raw = load_shipped("grid", name)
    path = path.resolve()
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    reject_unknown_keys(raw, GRID_KEYS, "", source=str(path))
    for required in ("name", "horizons", "models", "datasets"):
        if required not in raw:
            raise ConfigError(f"{path}: missing required key {required!r}")
    return path, raw


def _project_root(grid_path: Path) -> Path:
    for parent in grid_path.parents:
        if parent.name == "configs":
            return parent.parent
    return grid_path.parent


def _parse_models(raw_models, path: Path) -> tuple[ModelEntry, ...]:
    """The ``models:`` list: known model names, safe and distinct labels (no naive method's name)."""
    if not isinstance(raw_models, list) or not raw_models:
        raise ConfigError(f"{path}: 'models' must be a non-empty list of {{name: ...}} entries")
    models = []
    for index, entry in enumerate(raw_models):
        where = f"{path}: models[{index}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: expected a mapping with at least 'name'")
        reject_unknown_keys(entry, MODEL_KEYS, f"models[{index}]", source=str(path))
        if not known_model_name(entry.get("name")):
            raise ConfigError(f"{where}: name {entry.get('name')!r} is not one of "
                              f"{list(MODEL_NAMES + VARIANT_NAMES + BASELINE_NAMES)}")
        # A variant is its base model (whose configs it uses) with its presets as the first overrides:
        # the same cells, and hashes, as the base name with those overrides written out.
        base = resolve_variant(entry["name"])[0]
        presets = VARIANTS[entry["name"]].overrides() if base != entry["name"] else ()
        default_config = BASELINE_CONFIG if base in BASELINE_NAMES else DEFAULT_MODEL_CONFIG
        models.append(
            ModelEntry(
                name=base,
                label=safe_name(entry.get("label", entry["name"]), f"{where}.label"),
                config=_check_template(str(entry.get("config", default_config)), f"{where}.config"),
                overrides=(*presets, *str_list(entry.get("overrides"), f"{where}.overrides")),
                seeds=int_list(entry["seeds"], f"{where}.seeds") if "seeds" in entry else None,
            )
        )
    labels = [m.label for m in models]
    duplicates = sorted({label for label in labels if labels.count(label) > 1 or label in NAIVE_METHODS})
    if duplicates:
        raise ConfigError(f"{path}: model label(s) {duplicates} appear twice (or name a naive method); "
                          "give ablations a 'label'")
    return tuple(models)


def _parse_datasets(raw_datasets, labels: list[str], path: Path) -> tuple[tuple[str, ...], dict]:
    """The ``datasets:`` mapping (or list of names): canonical names, each with its per-label seeds."""
    if isinstance(raw_datasets, list):
        if not all(isinstance(name, str) for name in raw_datasets):
            raise ConfigError(f"{path}: 'datasets' as a list must hold dataset names, got {raw_datasets!r}")
        raw_datasets = dict.fromkeys(raw_datasets)
    if not isinstance(raw_datasets, dict) or not raw_datasets:
        raise ConfigError(f"{path}: 'datasets' must be a non-empty mapping of dataset -> options")
    datasets: list[str] = []
    dataset_seeds: dict[str, dict[str, tuple[int, ...]]] = {}
    for given, options in raw_datasets.items():
        where = f"{path}: datasets.{given}"
        name = canonical_dataset(str(given), where)
        if name in datasets:
            raise ConfigError(f"{where}: {name} is listed twice")
        options = optional_mapping(options, where)
        reject_unknown_keys(options, DATASET_KEYS, f"datasets.{given}", source=str(path))
        seeds = {}
        for label, seed_list in optional_mapping(options.get("seeds"), f"{where}.seeds (per model label)").items():
            if label not in labels:
                raise ConfigError(f"{where}.seeds: {label!r} is not a model label of this grid ({labels})")
            seeds[label] = int_list(seed_list, f"{where}.seeds.{label}")
        datasets.append(name)
        dataset_seeds[name] = seeds
    return tuple(datasets), dataset_seeds


def _parse_naive(value, path: Path) -> tuple[str, ...]:
    naive = str_list(value, f"{path}: naive")
    for method in naive:
        if method not in NAIVE_METHODS:
            raise ConfigError(f"{path}: naive method {method!r} is not one of {list(NAIVE_METHODS)}")
    return naive


def _parse_compare_with(value, path: Path) -> tuple[str, ...]:
    compare_with = str_list(value, f"{path}: compare_with")
    for label in compare_with:
        row_name(label, f"{path}: compare_with")
    return compare_with


def _check_template(template: str, where: str) -> str:
    try:
        template.format(model="m", dataset="d", dataset_lower="d")
    except (KeyError, IndexError, ValueError) as exc:
        raise ConfigError(f"{where}: {template!r} may only use {{model}}, {{dataset}} and {{dataset_lower}} "
                          f"({type(exc).__name__}: {exc})") from exc
    return template
