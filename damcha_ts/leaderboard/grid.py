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
      - name: itransformer_mha           # a damcha_ts.models name; its run config defaults to
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

Relative paths (``config``) are resolved against the project root: the folder holding the
``configs/`` directory the grid file lives in (or the grid file's own folder if it is elsewhere);
a path found only among the shipped configs (``configs/itransformer_mha/etth1.yaml``) is taken from there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from damcha_ts.errors import ConfigError

NAIVE_METHODS = ("repeat_last", "window_mean")
# Naive forecasts are deterministic; their rows carry this seed so every row has one.
NAIVE_SEED = 0

GRID_KEYS = {"name", "description", "horizons", "seeds", "naive", "overrides", "trainer", "compare_with", "models",
             "datasets"}
MODEL_KEYS = {"name", "label", "config", "overrides", "seeds"}
# The shipped per-dataset run configs (written for the training code): configs/<model>/<dataset>.yaml
DEFAULT_MODEL_CONFIG = "configs/{model}/{dataset_lower}.yaml"
DATASET_KEYS = {"seeds"}


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
        from damcha_ts.training.config import CONFIG_ROOT

        relative = model.config.format(model=model.name, dataset=dataset, dataset_lower=dataset.lower())
        path = Path(relative)
        if path.is_absolute():
            return path
        local, shipped = self.project_root / path, CONFIG_ROOT.parent / path
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
                            cells.append(
                                Cell(
                                    dataset,
                                    model.label,
                                    horizon,
                                    seed_lists[model.label][rank],
                                    config_path=self.config_path(model, dataset),
                                    overrides=(f"model.name={model.name}", *model.overrides, *self.overrides),
                                )
                            )
        return cells

    def command(self, dataset: str | None = None) -> str:
        """The command that (re)produces this grid's rows, relative to the project root."""
        only = f" --only-dataset {dataset}" if dataset else ""
        return f"damcha-ts leaderboard --config {self.relative_path}{only}"


def _project_root(grid_path: Path) -> Path:
    for parent in grid_path.parents:
        if parent.name == "configs":
            return parent.parent
    return grid_path.parent


def _check_keys(found: dict, allowed: set[str], where: str) -> None:
    unknown = sorted(set(found) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; valid keys: {sorted(allowed)}")


def _int_list(value, where: str, minimum: int = 0) -> tuple[int, ...]:
    """A non-empty list of distinct integers ≥ ``minimum`` (YAML's true/false are not integers)."""
    if (not isinstance(value, (list, tuple)) or not value
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= minimum for v in value)):
        raise ConfigError(f"{where}: expected a non-empty list of integers ≥ {minimum}, got {value!r}")
    if len(set(value)) != len(value):
        raise ConfigError(f"{where}: {value!r} lists a value twice")
    return tuple(value)


def _str_list(value, where: str) -> tuple[str, ...]:
    """A list of strings; a bare string is an error (it would otherwise be read letter by letter)."""
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: expected a list of strings, got {value!r}")
    return tuple(value)


def _safe_name(value, where: str) -> str:
    """Grid names and model labels become folder and file names: letters, digits, '_', '-', '.'."""
    text = str(value)
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", text):
        raise ConfigError(f"{where}: {text!r} may only use letters, digits, '_', '-' and '.' (it names folders)")
    return text


def _check_template(template: str, where: str) -> str:
    try:
        template.format(model="m", dataset="d", dataset_lower="d")
    except (KeyError, IndexError, ValueError) as exc:
        raise ConfigError(f"{where}: {template!r} may only use {{model}}, {{dataset}} and {{dataset_lower}} "
                          f"({type(exc).__name__}: {exc})") from exc
    return template


def _mapping(value, where: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a mapping, got {value!r}")
    return dict(value)


def _canonical_dataset(name: str, where: str) -> str:
    from damcha_ts.data import get_spec

    try:
        return get_spec(name).name
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from exc


def _find_grid(name: str | Path) -> Path:
    """A grid file from a path or a shipped name: ``ett`` or ``leaderboard/ett``."""
    from damcha_ts.training.config import CONFIG_ROOT

    path = Path(name)
    if path.is_file():
        return path.resolve()
    stem = str(name).removeprefix("leaderboard/")
    shipped = CONFIG_ROOT / "leaderboard" / f"{stem}.yaml"
    if not str(name).endswith((".yaml", ".yml")) and shipped.is_file():
        return shipped.resolve()
    names = sorted(p.stem for p in (CONFIG_ROOT / "leaderboard").glob("*.yaml"))
    raise ConfigError(f"leaderboard config {str(name)!r} is neither a file nor a shipped grid (shipped: {', '.join(names)})")


def load_grid(path: str | Path) -> LeaderboardGrid:
    """Read and validate a grid file; dataset names are canonicalised through the data registry."""
    import yaml

    path = _find_grid(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    _check_keys(raw, GRID_KEYS, str(path))
    for required in ("name", "horizons", "models", "datasets"):
        if required not in raw:
            raise ConfigError(f"{path}: missing required key {required!r}")

    from damcha_ts.models import MODEL_NAMES

    if not isinstance(raw["models"], list) or not raw["models"]:
        raise ConfigError(f"{path}: 'models' must be a non-empty list of {{name: ...}} entries")
    models = []
    for index, entry in enumerate(raw["models"]):
        where = f"{path}: models[{index}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: expected a mapping with at least 'name'")
        _check_keys(entry, MODEL_KEYS, where)
        if entry.get("name") not in MODEL_NAMES:
            raise ConfigError(f"{where}: name {entry.get('name')!r} is not one of {list(MODEL_NAMES)}")
        models.append(
            ModelEntry(
                name=entry["name"],
                label=_safe_name(entry.get("label", entry["name"]), f"{where}.label"),
                config=_check_template(str(entry.get("config", DEFAULT_MODEL_CONFIG)), f"{where}.config"),
                overrides=_str_list(entry.get("overrides"), f"{where}.overrides"),
                seeds=_int_list(entry["seeds"], f"{where}.seeds") if "seeds" in entry else None,
            )
        )
    labels = [m.label for m in models]
    duplicates = sorted({label for label in labels if labels.count(label) > 1 or label in NAIVE_METHODS})
    if duplicates:
        raise ConfigError(f"{path}: model label(s) {duplicates} appear twice (or name a naive method); "
                          "give ablations a 'label'")

    compare_with = _str_list(raw.get("compare_with"), f"{path}: compare_with")
    for label in compare_with:
        if label not in (*MODEL_NAMES, *NAIVE_METHODS):
            raise ConfigError(f"{path}: compare_with {label!r} is not one of {[*MODEL_NAMES, *NAIVE_METHODS]}")

    naive = _str_list(raw.get("naive"), f"{path}: naive")
    for method in naive:
        if method not in NAIVE_METHODS:
            raise ConfigError(f"{path}: naive method {method!r} is not one of {list(NAIVE_METHODS)}")

    datasets: list[str] = []
    dataset_seeds: dict[str, dict[str, tuple[int, ...]]] = {}
    raw_datasets = raw["datasets"]
    if isinstance(raw_datasets, list):
        if not all(isinstance(name, str) for name in raw_datasets):
            raise ConfigError(f"{path}: 'datasets' as a list must hold dataset names, got {raw_datasets!r}")
        raw_datasets = dict.fromkeys(raw_datasets)
    if not isinstance(raw_datasets, dict) or not raw_datasets:
        raise ConfigError(f"{path}: 'datasets' must be a non-empty mapping of dataset -> options")
    for given, options in raw_datasets.items():
        where = f"{path}: datasets.{given}"
        name = _canonical_dataset(str(given), where)
        if name in datasets:
            raise ConfigError(f"{where}: {name} is listed twice")
        options = _mapping(options, where)
        _check_keys(options, DATASET_KEYS, where)
        seeds = {}
        for label, seed_list in _mapping(options.get("seeds"), f"{where}.seeds (per model label)").items():
            if label not in labels:
                raise ConfigError(f"{where}.seeds: {label!r} is not a model label of this grid ({labels})")
            seeds[label] = _int_list(seed_list, f"{where}.seeds.{label}")
        datasets.append(name)
        dataset_seeds[name] = seeds

    return LeaderboardGrid(
        name=_safe_name(raw["name"], f"{path}: name"),
        path=path,
        project_root=_project_root(path),
        horizons=_int_list(raw["horizons"], f"{path}: horizons", minimum=1),
        seeds=_int_list(raw.get("seeds", [2021]), f"{path}: seeds"),
        naive=naive,
        overrides=_str_list(raw.get("overrides"), f"{path}: overrides"),
        models=tuple(models),
        datasets=tuple(datasets),
        dataset_seeds=dataset_seeds,
        trainer=_mapping(raw.get("trainer"), f"{path}: trainer"),
        description=str(raw.get("description", "")),
        compare_with=compare_with,
    )
