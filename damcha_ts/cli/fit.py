"""``damcha-ts fit``: train, select on validation, test, and write everything into ``--out``.

    damcha-ts fit --config itransformer_damcha/etth1 --horizon 96 --out runs/etth1_96
    damcha-ts fit --config my.yaml --set training.max_epochs=3 --set model.d_model=128 --out runs/x
    damcha-ts fit --data ETTh1 --model itransformer_damcha --horizon 96 --out runs/y
    damcha-ts fit --data my.csv --model gateformer_mha --horizon 24 --lookback 168 --out runs/z
    damcha-ts fit --data my.csv --model auto --time-budget 300 --horizon 24 --out runs/auto   # the best on validation
    damcha-ts fit --config itransformer_mha/traffic --devices 4 --strategy ddp --out runs/traffic  # multi-GPU
    damcha-ts fit --config ... --trainer limit_train_batches=20 --out runs/smoke   # any Trainer argument

``--config`` is a YAML path or a shipped config name (``configs/<model>/<dataset>.yaml``). Without
it, ``--data`` with ``--model`` uses the shipped official config when there is one for that
benchmark, and the model family's protocol defaults otherwise; for a CSV (not a benchmark) the
model size keys not given with ``--set model.KEY=...`` then follow the data, as in
``Forecaster.fit`` (``damcha_ts.models.sizing``). ``--model`` also takes a variant name
(``itransformer_damcha_static``: its base model's config with the variant's keys) or a baseline
(``naive``, ``seasonal_naive``...); without it ``--data`` trains ``schema.DEFAULT_MODEL``, Forecaster's default. DIR receives ``config.yaml``,
``checkpoints/``, ``logs/metrics.csv``, ``metrics.json``, per-step and per-variate breakdowns,
``model/`` (for ``damcha-ts predict``, calibrated on the validation windows for ``--level``) and
``forecast.png``. With ``--json`` stdout holds exactly one
JSON object (the test metrics); progress and logs go to stderr. A fit stopped by SIGTERM or Ctrl+C
exits 143 / 130 and ``--resume`` continues it; a fit that failed leaves ``fit_failed.txt`` in DIR,
and the same command starts that run over.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from damcha_ts.cli.arguments import (
    add_command,
    add_csv_arguments,
    add_json_flag,
    add_overrides_argument,
    add_resume_argument,
    add_scale_out_arguments,
    add_trainer_argument,
    column_list,
    csv_options,
    scale_out_settings,
    trainer_kwargs,
)
from damcha_ts.cli.fit_auto import run_auto
from damcha_ts.cli.run_folder import check_out_dir, training_command
from damcha_ts.data.covariates import covariate_settings
from damcha_ts.data.options import ProtocolOptions
from damcha_ts.data.registry import get_spec, is_benchmark_name
from damcha_ts.errors import ConfigError
from damcha_ts.schema import DEFAULT_MODEL


def register(subparsers) -> None:
    parser = add_command(
        subparsers, "fit",
        "train and test a model from a config (or --data/--model), writing model, metrics, logs, plot", __doc__,
    )
    source = parser.add_argument_group("what to train")
    source.add_argument("--config", help="run config: YAML path or shipped name such as itransformer_damcha/etth1")
    source.add_argument("--data", help="benchmark name or CSV path (without --config)")
    source.add_argument("--model", help=f"with --data: itransformer_mha, itransformer_damcha, gateformer_mha, "
                        "gateformer_damcha, a variant such as itransformer_damcha_static, or a baseline: naive, "
                        f"seasonal_naive, window_mean, drift, linear, or auto: the search over all of them within "
                        f"--time-budget (default: {DEFAULT_MODEL}, as Forecaster's)")
    source.add_argument("--horizon", "--pred-len", dest="horizon", type=int,
                        help="forecast horizon H (picks per-horizon config sections)")
    source.add_argument("--lookback", "--seq-len", dest="lookback", type=int,
                        help=f"input length L (default: the config's, {ProtocolOptions.seq_len} without one)")
    source.add_argument("--val-size", type=float, metavar="ROWS_OR_FRACTION",
                        help="validation tail: rows (e.g. 500) or a fraction (e.g. 0.1) of the series")
    source.add_argument("--test-size", type=float, metavar="ROWS_OR_FRACTION",
                        help="test tail: rows or a fraction (the run scores it, so it must hold windows)")
    for kind, what in (("past", "observed up to the forecast origin"), ("future", "known over the horizon too"),
                       ("static", "constant per entity (with --set data.entity_col=COL)")):
        source.add_argument(f"--{kind}-covariates", type=column_list, metavar="COL[,COL...]",
                            help=f"columns the model reads and never forecasts, {what}")
    add_overrides_argument(source)
    search = parser.add_argument_group("--model auto: the search over models (Forecaster('auto'), docs/forecasting.md)")
    search.add_argument("--time-budget", type=float, metavar="SECONDS",
                        help="seconds the search and the final fit may take (default 300)")
    search.add_argument("--search", metavar="FILE", help="YAML file narrowing or widening the space (AutoSpace keys)")
    search.add_argument("--storage", help="SQLite file or Optuna storage URL keeping the study: the same command (with --overwrite or a new --out) continues it, "
                        "and run on other machines at once with one database (PostgreSQL), joins it")
    search.add_argument("--seed", type=int, help="the search's and every candidate's seed (default: Forecaster's)")
    search.add_argument("--workers", type=int, metavar="K", help="processes running trials of the one study (default 1)")
    parser.add_argument("--out", required=True, help="output directory")
    add_resume_argument(parser)
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the run already in --out (without it, or --resume, that is an error)")
    parser.add_argument("--no-plot", action="store_true", help="skip forecast.png")
    add_json_flag(parser, "the test metrics as one JSON object")
    add_csv_arguments(parser)
    add_scale_out_arguments(parser)
    add_trainer_argument(parser)
    parser.set_defaults(func=run)


def resolve_cli_config(args: argparse.Namespace):
    """(the :class:`RunConfig` the command line describes (see the module docstring), its data
    prepared when sizing the model needed it, else None): flags are typed settings applied over
    the config file, ``--set`` text wins over both."""
    from damcha_ts.training import RunConfig

    sizes = {key: getattr(args, key) for key in ("val_size", "test_size") if getattr(args, key) is not None}
    covariates = covariate_settings(args.past_covariates, args.future_covariates, args.static_covariates)
    data = {**({"seq_len": args.lookback} if args.lookback is not None else {}), **sizes, **covariates,
            **csv_options(args)}
    updates = {"data": data, "training": scale_out_settings(args)}
    if args.config:
        if args.data or args.model:
            raise ConfigError("give either --config or --data/--model, not both (use --set to change a config)")
        source = args.config
    elif args.data:
        source = default_config(args.data, args.model or DEFAULT_MODEL)
    else:
        raise ConfigError("give --config CONFIG, or --data DATASET_OR_CSV (with --model NAME, default "
                          f"{DEFAULT_MODEL})")
    if args.config or (is_benchmark_name(args.data) and not Path(args.data).is_file()):
        # A config file, or a benchmark: the sizes and training recipe of its config.
        return RunConfig.load(source, horizon=args.horizon, updates=updates, overrides=args.overrides), None
    updates["training"] = {**_user_data_recipe(args.overrides), **updates["training"]}
    return _data_sized(RunConfig.load(source, horizon=args.horizon, updates=updates, overrides=args.overrides),
                       source, args, updates)


def _user_data_recipe(overrides) -> dict:
    """The training keys of the user-data recipe (``TrainingConfig.for_user_data``, as ``Forecaster``
    trains) for a CSV, given the ``--set training.KEY=...`` the command line names."""
    from damcha_ts.training.config import USER_DATA_DEFAULTS, TrainingConfig
    from damcha_ts.training.config_files import parse_override

    given = {key: value for (section, key), value in map(parse_override, overrides) if section == "training"}
    recipe = TrainingConfig.for_user_data(**given)
    return {key: getattr(recipe, key) for key in USER_DATA_DEFAULTS}


def _data_sized(run, source, args: argparse.Namespace, updates: dict):
    """(the run, its prepared data or None): ``--data FILE --model NAME``: the model keys not given
    by ``--set`` that the data decides (sizes, a seasonal model's season) follow it, as in
    ``Forecaster.fit`` (:func:`damcha_ts.models.sizing.decided_by_data`), and so does the batch size
    (``batch_size_for_windows`` of its train windows)."""
    from damcha_ts.models.sizing import SIZE_KEYS, decided_by_data
    from damcha_ts.training import RunConfig
    from damcha_ts.training.config import batch_size_for_windows, model_keys
    from damcha_ts.training.config_files import parse_override

    sets = {(section, key): value for (section, key), value in map(parse_override, args.overrides)}
    given = {key: value for (section, key), value in sets.items() if section == "model"}
    keys = model_keys(run.model_name)
    if (all(key in given for key in SIZE_KEYS if key in keys) and ("season_length" not in keys or "season_length" in given)
            and ("training", "batch_size") in sets):
        return run, None
    panel = run.data.prepare()  # the decided keys change the model section only: the run trains on this panel
    decided = decided_by_data(panel, given, keys)
    batch = {} if ("training", "batch_size") in sets else {"batch_size": batch_size_for_windows(panel.window_count("train"))}
    updates = {**updates, "model": {k: (list(v) if isinstance(v, tuple) else v) for k, v in decided.items()},
               "training": {**updates["training"], **batch}}
    return RunConfig.load(source, horizon=args.horizon, updates=updates, overrides=args.overrides), panel


def default_config(data: str, model: str) -> dict:
    """The official config of a benchmark when shipped, else the family's protocol defaults."""
    from damcha_ts.models.registry import (
        BASELINES,
        MODEL_NAMES,
        VARIANT_NAMES,
        known_model_name,
        model_spec,
        resolve_variant,
    )
    from damcha_ts.training.config import CONFIG_ROOT, official_config_name

    if not known_model_name(model):
        raise ConfigError(f"--model {model!r} is not one of {', '.join(MODEL_NAMES + VARIANT_NAMES + tuple(BASELINES))}")
    base = resolve_variant(model)[0]  # a variant: its base model's official config, then its presets
    if is_benchmark_name(data) and not Path(data).is_file():
        official = official_config_name(base, get_spec(data).name)
        if official is not None:
            variant = {"model": {"name": model}} if model != base else {}
            return {"extends": str(CONFIG_ROOT / f"{official}.yaml"), **variant}
    family = model_spec(base).family
    config = {
        "extends": str(CONFIG_ROOT / "_base" / ("baselines.yaml" if family in BASELINES else f"{family}.yaml")),
        # A file by its absolute path: the saved model and config then work from any folder.
        "data": {"dataset": str(Path(data).expanduser().resolve()) if Path(data).expanduser().is_file() else data},
        "model": {"name": model},
    }
    if not is_benchmark_name(data):
        # User data: time marks from its own frequency (the benchmark convention is hourly marks).
        config["data"]["time_features_freq"] = None
    return config


def write_forecast_plot(out_dir: Path, series) -> Path:
    """Plot the last test window of the run's prepared ``series``: its lookback, the forecast and the truth."""
    from damcha_ts.api import Forecaster

    forecaster = Forecaster.load(out_dir)
    # The first entity's last test window; named by the entity column when the panel has one.
    entity = None if series.entity_col is None else series.entities[0]
    series = series.series[0]
    L, H = series.seq_len, series.pred_len
    end = series.borders["test"][1]
    frame = pd.DataFrame(series.history_rows(), index=series.timestamps, columns=series.history_columns)
    history, truth = frame.iloc[end - H - L : end - H], frame[series.columns].iloc[end - H : end]
    future = frame[forecaster.meta_.future_covariates].iloc[end - H : end] if forecaster.meta_.future_covariates else None
    if entity is not None:
        history = history.assign(**{forecaster.meta_.entity_col: entity})
        future = None if future is None else future.assign(**{forecaster.meta_.entity_col: entity})
    path = out_dir / "forecast.png"
    forecaster.plot(history, truth=truth, path=path, future=future, entity=entity, allow_irregular=True)
    return path


def train_run(command: str, config, out_dir: Path, args: argparse.Namespace, *, series=None, plot: bool = True,
              overwrite: bool = False) -> dict | None:
    """``run_experiment`` of ``config`` into ``out_dir`` within :func:`training_command`, on its data
    prepared once (``series``, or here) for training and testing, ``model/`` calibrated for
    ``predict --level`` and ``forecast.png`` (``plot``): the result, or None on a DDP rank but 0
    (every rank trains; rank 0 wrote model/ and speaks for the run)."""
    from lightning.fabric.utilities.rank_zero import rank_zero_only

    from damcha_ts.forecasting.experiment import run_experiment

    with training_command(command, out_dir, resume=args.resume, overwrite=overwrite, config_hash=config.config_hash()):
        series = config.data.prepare() if series is None else series
        # The progress bar goes to stderr; it is only useful on a terminal (not in CI logs).
        result = run_experiment(config, out_dir, resume=args.resume, progress=sys.stderr.isatty(),
                                trainer_kwargs=trainer_kwargs(args), panel=series, calibrated=True)
        if rank_zero_only.rank != 0:
            return None
        if plot:
            result["plot"] = str(write_forecast_plot(out_dir, series))
    return result


def run(args: argparse.Namespace) -> int:
    if args.model == "auto":
        return run_auto(args)
    given = [flag for flag, value in (("--time-budget", args.time_budget), ("--search", args.search),
                                      ("--storage", args.storage), ("--seed", args.seed), ("--workers", args.workers))
             if value is not None]
    if given:
        raise ConfigError(f"{', '.join(given)}: only with --model auto")
    config, series = resolve_cli_config(args)
    out_dir = Path(args.out)
    check_out_dir(out_dir, resume=args.resume, overwrite=args.overwrite, config_hash=config.config_hash())
    result = train_run("fit", config, out_dir, args, series=series, plot=not args.no_plot, overwrite=args.overwrite)
    if result is None:
        return 0
    print(json.dumps(result) if args.json else (  # --json: stdout holds the one JSON object
        f"{result['model']} on {result['dataset']} H={result['horizon']}: test MSE {result['mse']:.4f}  "
        f"MAE {result['mae']:.4f} over {result['test_windows']} windows "
        f"(original scale: MSE {result['mse_inverse']:.4f}  MAE {result['mae_inverse']:.4f})\n"
        f"{_training_line(result, config.training.max_steps)}\n"
        f"written to {out_dir}"
    ))
    return 0


def _training_line(result: dict, max_steps: int | None) -> str:
    if result["n_params"] == 0:  # a fixed rule (naive, seasonal_naive, ...): nothing was trained
        return f"a fixed rule, nothing to train: val loss {result['best_val_loss']:.4f}"
    if max_steps is not None:
        return (f"best step {result['best_step']} of a {max_steps}-step budget ({result['epochs_run']} epochs run), "
                f"val loss {result['best_val_loss']:.4f}, {result['n_params']:,} parameters")
    return (f"best epoch {result['best_epoch'] + 1} of {result['epochs_run']}, val loss {result['best_val_loss']:.4f}, "
            f"{_seconds_per_epoch(result)}, {result['n_params']:,} parameters")


def _seconds_per_epoch(result: dict) -> str:
    """A resumed run that had already finished trains no epoch, so it has no timing."""
    seconds = result.get("seconds_per_epoch")
    return "no epoch trained by this call" if seconds is None else f"{seconds:.1f} s/epoch"
