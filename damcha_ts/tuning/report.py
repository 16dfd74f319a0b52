"""After a study: the best config as a ready run-config YAML, and a markdown report with plots.

Plots are drawn with matplotlib directly (imported here, lazily): optimisation history, parameter
importances (PED-ANOVA, which needs nothing beyond Optuna; fANOVA would need scikit-learn) and
the per-epoch validation losses that the pruner saw.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from damcha_ts.files import save_figure, write_atomically
from damcha_ts.tuning.launch import INVOCATIONS_ATTR
from damcha_ts.tuning.result import StudyResult
from damcha_ts.tuning.space import SearchSpec
from damcha_ts.workqueue.queue import WORKER_ATTR

REPORT_FILE = "report.md"
HISTORY_PNG = "optimization_history.png"
IMPORTANCES_PNG = "param_importances.png"
INTERMEDIATE_PNG = "intermediate_values.png"
_TOP_TRIALS = 15


def export_best_config(trial, path: str | Path, *, study_name: str, trainer_kwargs: Mapping | None = None) -> Path:
    """Write the trial's resolved run config as YAML, loadable by ``fit`` and the leaderboard; the
    header names the Lightning arguments the trials ran with, which a run config does not hold."""
    import yaml

    path = Path(path)
    config = trial.user_attrs["config"]
    searched = ", ".join(f"{k}={v}" for k, v in trial.params.items())
    header = (
        f"# Best config of Optuna study {study_name!r}: trial {trial.number}, "
        f"validation MSE {trial.value:.6f}.\n"
        f"# Searched: {searched}\n"
        "# A complete run config: pass it to `damcha-ts fit --config` or to the leaderboard.\n"
    )
    if trainer_kwargs:
        flags = " ".join(f"--trainer {k}={v}" for k, v in trainer_kwargs.items())
        header += f"# The trials also ran with these Lightning arguments; to train as they did, add: {flags}\n"
    write_atomically(path, header + yaml.safe_dump(config, sort_keys=False))
    return path


def param_importances(study) -> tuple[dict[str, float], str | None]:
    """PED-ANOVA importances of the searched parameters, or ({}, why not)."""
    import warnings

    import optuna
    from optuna.trial import TrialState

    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(complete) < 2:
        return {}, f"needs at least 2 complete trials (have {len(complete)})"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            evaluator = optuna.importance.PedAnovaImportanceEvaluator()
            values = optuna.importance.get_param_importances(study, evaluator=evaluator)
    except (ValueError, RuntimeError, ZeroDivisionError) as exc:
        return {}, f"could not be computed: {exc}"
    return dict(values), None


def _plot_history(trials, path: Path) -> None:
    import matplotlib.pyplot as plt
    from optuna.trial import TrialState

    fig, ax = plt.subplots(figsize=(7, 4))
    complete = [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None]
    pruned = [t for t in trials if t.state == TrialState.PRUNED and t.intermediate_values]
    if complete:
        ax.scatter([t.number for t in complete], [t.value for t in complete], label="complete", color="tab:blue")
        ordered = sorted(complete, key=lambda t: t.number)
        best_so_far = list(itertools.accumulate((t.value for t in ordered), min))
        ax.step([t.number for t in ordered], best_so_far, where="post", color="tab:green", label="best so far")
    if pruned:
        ax.scatter([t.number for t in pruned], [t.intermediate_values[max(t.intermediate_values)] for t in pruned],
                   marker="x", color="tab:gray", label="pruned (last val_loss)")
    ax.set_xlabel("trial")
    ax.set_ylabel("validation MSE")
    _save_per_trial(fig, ax, "Optimisation history", bool(complete or pruned), path)


def _plot_intermediate(trials, best_number: int | None, path: Path) -> None:
    import matplotlib.pyplot as plt
    from optuna.trial import TrialState

    fig, ax = plt.subplots(figsize=(7, 4))
    colors = {TrialState.COMPLETE: "tab:blue", TrialState.PRUNED: "tab:red"}
    labelled = set()
    for t in trials:
        if not t.intermediate_values:
            continue
        epochs = sorted(t.intermediate_values)
        values = [t.intermediate_values[e] for e in epochs]
        state = t.state if t.state in colors else None
        label = None
        if state is not None and state not in labelled:
            label = state.name.lower()
            labelled.add(state)
        ax.plot(epochs, values, color=colors.get(state, "tab:gray"), alpha=0.5, marker=".", label=label)
        if t.number == best_number:
            ax.plot(epochs, values, color="black", linewidth=2, label=f"best (trial {t.number})")
    ax.set_xlabel("epoch")
    ax.set_ylabel("val_loss (reported to the pruner)")
    _save_per_trial(fig, ax, "Intermediate values", bool(labelled), path)


def _save_per_trial(fig, ax, title: str, legend: bool, path: Path) -> None:
    """Whole-number ticks (trials, epochs), the title and a legend when anything was drawn; saved, closed."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(title)
    if legend:
        ax.legend()
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)


def _plot_importances(importances: dict[str, float], why_not: str | None, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, max(2.5, 0.5 * len(importances) + 1)))
    if importances:
        names = list(importances)[::-1]
        ax.barh(names, [importances[n] for n in names], color="tab:blue")
        ax.set_xlabel("importance (PED-ANOVA, normalised)")
    else:
        ax.text(0.5, 0.5, f"Parameter importances {why_not}", ha="center", va="center", wrap=True)
        ax.set_axis_off()
    ax.set_title("Parameter importances")
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)


def _format(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _invocation_lines(invocations: list[dict]) -> list[str]:
    """Every command that added trials to this study, oldest first (only when there were several)."""
    if len(invocations) < 2:
        return []
    lines = ["Invocations of this study (oldest first):", ""]
    for k, item in enumerate(invocations, 1):
        lines.append(f"{k}. `{item['command']}` ({item.get('started', '?')}): {item['trials_before']} "
                     f"trials before, {item['n_trials']} added, launch token {item.get('launch_token', '?')}")
    return [*lines, ""]


def _tokens(invocations: list[dict]) -> str:
    tokens = [str(item["launch_token"]) for item in invocations if "launch_token" in item]
    return ("launch tokens " + ", ".join(tokens)) if tokens else "not recorded"


def write_report(
    study, search: SearchSpec, result: StudyResult, out_dir: str | Path, *, command: str | None = None
) -> Path:
    """Write ``report.md`` and its three PNG plots into ``out_dir``; returns the report path."""
    out_dir = Path(out_dir)
    trials = study.get_trials(deepcopy=False)
    importances, why_not = param_importances(study)
    _draw_plots(trials, result.best_trial, importances, why_not, out_dir)
    lines = [*_overview_lines(study, search, result, command), *_best_trial_lines(result), *_comparison_lines(result),
             *_plot_lines(), *_importance_lines(importances, why_not), *_top_trial_lines(trials),
             *_unfinished_trial_lines(trials), *_space_lines(search)]
    path = out_dir / REPORT_FILE
    write_atomically(path, "\n".join(lines))
    return path


def _draw_plots(trials, best_number: int | None, importances: dict[str, float], why_not: str | None,
                out_dir: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only; never open a window
    _plot_history(trials, out_dir / HISTORY_PNG)
    _plot_intermediate(trials, best_number, out_dir / INTERMEDIATE_PNG)
    _plot_importances(importances, why_not, out_dir / IMPORTANCES_PNG)


def _overview_lines(study, search: SearchSpec, result: StudyResult, command: str | None) -> list[str]:
    """The title, the command and every invocation, how the study searches, and its trial counts."""
    invocations = study.user_attrs.get(INVOCATIONS_ATTR, [])
    pruner = ", ".join(f"{k}={v}" for k, v in search.pruner_arguments.items())
    return [
        f"# Optuna study `{result.study_name}`",
        "",
        *([f"Command: `{command}`", ""] if command else []),
        *_invocation_lines(invocations),
        f"- storage: `{result.storage}`",
        "- objective: best validation MSE (`val_loss`, z-scored scale); the study never sees the "
        "test split, which is used once, for the best config, after the study",
        f"- sampler: TPE (multivariate, constant liar, seed {search.sampler_seed}, "
        f"{search.n_startup_trials} start-up trials); pruner: {search.pruner_type}"
        + (f" ({pruner})" if pruner else ""),
        "- each worker's sampler seed mixes that seed with its launch's random token "
        f"({_tokens(invocations)}) and its index, so that resumed and "
        "simultaneous launches do not replay one another's trials: a study is traceable, and a "
        "rerun of the command samples anew",
        *([f"- Lightning arguments of every run: `{dict(search.trainer_kwargs)}`"] if search.trainer_kwargs else []),
        "",
        "| trials | complete | pruned | failed | running | waiting |",
        "|---|---|---|---|---|---|",
        f"| {result.n_trials} | {result.n_complete} | {result.n_pruned} | {result.n_failed} | {result.n_running} "
        f"| {result.n_waiting} |",
        "",
    ]


def _best_trial_lines(result: StudyResult) -> list[str]:
    if result.best_trial is None:
        return ["No trial completed yet, so there is no best config.", ""]
    config = Path(result.best_config).name
    return [
        "## Best trial",
        "",
        f"Trial {result.best_trial}: validation MSE **{result.best_value:.6f}**. "
        f"Its full run config: [`{config}`]({config}).",
        "",
        "| parameter | value |",
        "|---|---|",
        *[f"| `{k}` | {_format(v)} |" for k, v in result.best_params.items()],
        "",
    ]


def _comparison_lines(result: StudyResult) -> list[str]:
    """The best config and the base config, each trained once more and tested once (when they were)."""
    if not (result.tuned or result.default):
        return []
    lines = ["## Tuned vs default config (each trained once more, then tested once)", "",
             "| config | val MSE | test MSE | test MAE | epochs run | parameters |", "|---|---|---|---|---|---|"]
    for label, metrics in (("tuned (best trial)", result.tuned), ("default (base config)", result.default)):
        if metrics:
            lines.append(
                f"| {label} | {metrics['val_mse']:.4f} | {metrics['mse']:.4f} | {metrics['mae']:.4f} | "
                f"{metrics['epochs_run']} | {metrics['n_params']:,} |"
            )
    return [*lines, ""]


def _plot_lines() -> list[str]:
    return ["## Plots", "", f"![optimisation history]({HISTORY_PNG})", "",
            f"![intermediate values]({INTERMEDIATE_PNG})", "", f"![parameter importances]({IMPORTANCES_PNG})", ""]


def _importance_lines(importances: dict[str, float], why_not: str | None) -> list[str]:
    lines = ["## Parameter importances (PED-ANOVA)", ""]
    if not importances:
        return [*lines, f"Not available: {why_not}."]
    return [*lines, "| parameter | importance |", "|---|---|", *[f"| `{k}` | {v:.3f} |" for k, v in importances.items()]]


def _top_trial_lines(trials) -> list[str]:
    """The best complete trials (at most ``_TOP_TRIALS``), lowest validation MSE first."""
    from optuna.trial import TrialState

    ranked = sorted(
        (t for t in trials if t.state == TrialState.COMPLETE and t.value is not None), key=lambda t: t.value
    )[:_TOP_TRIALS]
    lines = ["", f"## Best {len(ranked)} complete trials", "", "| trial | val MSE | epochs | parameters |", "|---|---|---|---|"]
    for t in ranked:
        params = ", ".join(f"`{k}`={_format(v)}" for k, v in t.params.items())
        lines.append(f"| {t.number} | {t.value:.6f} | {t.user_attrs.get('epochs_run', '')} | {params} |")
    return lines


def _unfinished_trial_lines(trials) -> list[str]:
    """Every trial still RUNNING or WAITING, with its state: a trial stuck RUNNING (its worker gone on
    a storage without heartbeats, or not yet past the grace period) is seen, not left out."""
    unfinished = [t for t in trials if not t.state.is_finished()]
    if not unfinished:
        return []
    lines = ["", f"## {len(unfinished)} trials not finished", "", "| trial | state | worker | started | parameters |",
             "|---|---|---|---|---|"]
    for t in unfinished:
        params = ", ".join(f"`{k}`={_format(v)}" for k, v in t.params.items())
        started = t.datetime_start.isoformat(sep=" ", timespec="seconds") if t.datetime_start else ""
        lines.append(f"| {t.number} | {t.state.name} | {t.user_attrs.get(WORKER_ATTR, '')} | {started} | {params} |")
    return lines


def _space_lines(search: SearchSpec) -> list[str]:
    import yaml

    space = yaml.safe_dump({"space": search.raw.get("space")}, sort_keys=False, default_flow_style=None).rstrip()
    return ["", "## Search space", "", "```yaml", space, "```", ""]
