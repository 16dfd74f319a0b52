"""``damcha-ts leaderboard --config configs/leaderboard/NAME.yaml``: run a grid, then rewrite the report.

Runs every cell of the grid that has no row in the results CSV yet, on the grid's Optuna study in
``--storage`` (default: the SQLite file ``leaderboard.db`` beside the CSV; a PostgreSQL URL lets
many machines run one grid: start the same command on each). ``--workers K`` runs K cells at once on
this machine (default: one per GPU, else one); ``--max-cells N`` stops after N, so a background job
can run the grid in pieces; ``--status`` says where every cell stands. Then, when a cell finished,
the CSV is exported from the storage and ``LEADERBOARD.md`` and its plots are regenerated next to
it; a run that trains nothing changes no file.
``--config`` may be repeated (grids run in order). The report covers every grid ever run or reported
into that results folder (listed in ``report_grids.yaml`` beside the CSV) and every grid named in the
CSV, so a run over one grid keeps the other grids' sections. ``--report-only`` skips the runs and
regenerates the report. Progress goes to stderr; with ``--json`` stdout holds exactly one JSON object
(what ran, what failed, which dataset files are missing or corrupt).
Exit status: 0 when no cell failed (cells of missing datasets are skipped, not failed), 1 when a cell
failed, a dataset file fails its checksum, or the report could not be regenerated (the rows of the
cells that ran are kept, and so is the summary).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from damcha_ts.cli.arguments import add_json_flag
from damcha_ts.data import get_spec, locate_dataset
from damcha_ts.errors import ChecksumError, ConfigError, DatasetNotFoundError

DEFAULT_RESULTS = "benchmarks/results/leaderboard.csv"
DEFAULT_RUNS = "runs/leaderboard"
REPORT_NAME = "LEADERBOARD.md"


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "leaderboard",
        help="run a benchmark grid (resumable) and regenerate LEADERBOARD.md",
        description=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument(
        "--config", required=True, action="append",
        help="grid file, e.g. configs/leaderboard/ett.yaml (repeatable)",
    )
    parser.add_argument(
        "--results",
        help=f"results CSV (default: <project>/{DEFAULT_RESULTS}); the report is written beside it",
    )
    parser.add_argument(
        "--only-dataset", nargs="+", action="extend", default=[], metavar="DATASET",
        help="run only these datasets of the grid",
    )
    parser.add_argument(
        "--only-model", nargs="+", action="extend", default=[], metavar="MODEL",
        help="run only these model rows of the grid (labels as in the CSV, e.g. itransformer_damcha)",
    )
    parser.add_argument("--max-cells", type=int, help="run at most N unfinished cells (over all grids), then stop")
    parser.add_argument(
        "--workers", type=int, metavar="K",
        help="worker processes on this machine, each with its share of the cores or one GPU "
             "(default: one per GPU; without one, 1 with every core)",
    )
    parser.add_argument(
        "--storage", metavar="URL",
        help="where the grid's cells are queued and recorded: a SQLite file or database URL, e.g. "
             "postgresql+psycopg2://user:password@host/db for many machines (default: leaderboard.db "
             "beside the results CSV)",
    )
    parser.add_argument("--status", action="store_true",
                        help="only say where every cell stands (done / running where / waiting / failed)")
    parser.add_argument("--retry-failed", action="store_true",
                        help="queue again the cells that failed with an error on an earlier run")
    parser.add_argument("--no-wait", action="store_true",
                        help="stop when no cell is waiting, instead of waiting for the cells other "
                             "workers are running (a dead worker's cell comes back to the queue)")
    parser.add_argument("--heartbeat", type=int, default=60, metavar="SECONDS",
                        help="a worker's heartbeat interval; its cell is retried after 3 missed beats "
                             "(default 60)")
    parser.add_argument("--report-only", action="store_true", help="only regenerate the report from the CSV")
    parser.add_argument(
        "--merge", action="append", default=[], metavar="CSV",
        help="first add the finished cells of another machine's results CSV (with their curves and "
             "samples from beside it); implies --report-only (repeatable)",
    )
    add_json_flag(parser, "one JSON summary")
    parser.add_argument("--data-dir", help="folder holding the dataset files (sets DAMCHA_TS_DATA)")
    parser.add_argument("--runs-dir", help=f"per-cell run folders (default: <project>/{DEFAULT_RUNS})")
    parser.add_argument("--no-download", action="store_true", help="never download a missing dataset file")
    parser.set_defaults(func=run)


def _display(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root))
    except ValueError:
        return str(path)


def _report_grids(grids: list, rows, results: Path) -> list:
    """The grids the report covers: those given, those ``report_grids.yaml`` lists, and every grid
    named in the CSV's ``grid`` column (for missing notes)."""
    from damcha_ts.leaderboard.grid import load_grid
    from damcha_ts.leaderboard.report import REPORT_GRIDS_NAME, read_report_grids

    found = {grid.path: grid for grid in grids}
    root = grids[0].project_root
    listed = read_report_grids(results)
    for name in dict.fromkeys([*listed, *(row["grid"] for row in rows if row["grid"])]):
        path = (Path(name) if Path(name).is_absolute() else root / name).resolve()
        if path in found:
            continue
        if path.is_file():
            found[path] = load_grid(path)
        elif name in listed:
            print(f"damcha-ts: {results.parent / REPORT_GRIDS_NAME} lists {name}, which is not a file; "
                  "its cells are left out of the report", file=sys.stderr)
    return list(found.values())


def _merge(summaries: list, grids: list, results: Path) -> dict:
    """The outcome of every grid's run: a LeaderboardRun's fields (``grids`` for its ``grid``),
    counts added up and lists concatenated."""
    from damcha_ts.leaderboard.runner import LeaderboardRun

    nothing = LeaderboardRun(grid="", results=str(results), storage=summaries[0].storage if summaries else None)
    merged = {"grids": [grid.relative_path for grid in grids], **nothing.as_dict()}
    del merged["grid"]
    for summary in summaries:
        for key, value in summary.as_dict().items():
            if key not in ("grid", "results", "storage"):
                merged[key] += value  # counts add up, lists concatenate
    return merged


def run(args: argparse.Namespace) -> int:
    from damcha_ts.leaderboard.grid import load_grid

    _check_arguments(args)
    grids = [load_grid(path) for path in args.config]
    root = grids[0].project_root
    results = Path(args.results).resolve() if args.results else root / DEFAULT_RESULTS
    runs_dir = Path(args.runs_dir).resolve() if args.runs_dir else root / DEFAULT_RUNS
    only = tuple(dict.fromkeys(_canonical(name, grids) for name in args.only_dataset))
    only_models = tuple(dict.fromkeys(_known_model(label, grids) for label in args.only_model))
    if args.status:
        return _print_status(args, grids, results, runs_dir, only, only_models)
    if args.merge:
        _merge_other_results(args.merge, results)
    summaries = []
    if not (args.report_only or args.merge):
        summaries = _run_grids(args, grids, results, runs_dir, only, only_models)
    outcome = _merge(summaries, grids, results)
    report, report_error = None, None
    if args.report_only or args.merge or outcome["ran"] or outcome["exported"]:
        report, report_error = _report_after_runs(grids, results, runs_dir, root, grids_ran=bool(summaries))
    else:
        # Nothing new to show: the committed report, plots and curves stay byte for byte as they are.
        outcome["report_unchanged"] = str(results.parent / REPORT_NAME)
        problems = outcome["failed"] or outcome["corrupt_datasets"] or any(outcome["worker_exit_codes"])
        ended = "no cell finished" if problems or outcome["remaining"] else "nothing to run"
        print(f"{ended}; report left as it is "
              f"({outcome['report_unchanged']}; --report-only regenerates it)", file=sys.stderr)
    outcome["report"] = None if report is None else str(report)
    if report_error:
        outcome["report_error"] = report_error
    _print_outcome(args, outcome, report, grids_ran=bool(summaries))
    broken_workers = any(code != 0 for code in outcome["worker_exit_codes"])
    # A cell that failed on an earlier run still leaves the grid unfinished for a real error.
    failed = outcome["failed"] or outcome["failed_before"]
    return 1 if failed or outcome["corrupt_datasets"] or report_error or broken_workers else 0


def _print_status(args: argparse.Namespace, grids: list, results: Path, runs_dir: Path, only: tuple,
                  only_models: tuple) -> int:
    """``--status``: per grid, cells done / running (where) / waiting / failed / not queued yet."""
    from damcha_ts.leaderboard.runner import leaderboard_status

    statuses = [leaderboard_status(grid, results, runs_dir=runs_dir, storage=args.storage, only_datasets=only,
                                   only_models=only_models) for grid in grids]
    if args.json:
        print(json.dumps(statuses if len(statuses) > 1 else statuses[0], default=str))
        return 0
    for status in statuses:
        print(f"{status['grid']} ({status['storage']}): {status['cells']} cells: {status['done']} done, "
              f"{len(status['running'])} running, {status['waiting']} waiting, {len(status['failed'])} failed, "
              f"{status['not_queued']} not queued yet")
        for item in status["running"]:
            print(f"  running  {item['cell']} on {item['worker']} since {item['since']}")
        for item in status["failed"]:
            print(f"  failed   {item['cell']}: {item['error'].strip().splitlines()[-1]}")
    return 0


def _check_arguments(args: argparse.Namespace) -> None:
    """Reject bad counts before anything runs; ``--data-dir`` becomes ``DAMCHA_TS_DATA``."""
    if args.max_cells is not None and args.max_cells < 0:
        raise ConfigError(f"--max-cells must be >= 0, got {args.max_cells}")
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {args.workers}")
    if args.heartbeat < 1:
        raise ConfigError(f"--heartbeat must be >= 1 second, got {args.heartbeat}")
    if args.data_dir:
        data_dir = Path(args.data_dir).expanduser().resolve()
        if not data_dir.is_dir():
            raise ConfigError(f"--data-dir {args.data_dir}: no such folder")
        os.environ["DAMCHA_TS_DATA"] = str(data_dir)  # inherited by GPU worker processes too


def _merge_other_results(sources: list[str], results: Path) -> None:
    """Add the finished cells of other machines' results CSVs (``--merge``), one line per row."""
    from damcha_ts.leaderboard.merge import check_merge_source, merge_results

    for source in sources:  # every source checked first: a bad row in the last one merges nothing
        check_merge_source(source, results)
    for source in sources:
        for row in merge_results(source, results):
            print(f"merged {row['dataset']} {row['model']} H={row['horizon']} seed={row['seed']}: "
                  f"mse={row['mse']:.4f} ({row['hardware']})", file=sys.stderr)


def _run_grids(
    args: argparse.Namespace, grids: list, results: Path, runs_dir: Path, only: tuple, only_models: tuple
) -> list:
    """Run the grids in order (only the ``--only-dataset``/``--only-model`` cells); ``--max-cells`` is
    one budget over all of them."""
    from damcha_ts.leaderboard.queue import QueueSettings
    from damcha_ts.leaderboard.runner import run_leaderboard

    summaries = []
    budget = args.max_cells
    for grid in grids:
        summary = run_leaderboard(
            grid, results, runs_dir=runs_dir, storage=args.storage, workers=args.workers, only_datasets=only,
            only_models=only_models, max_cells=budget, download=not args.no_download,
            retry_failed=args.retry_failed, wait=not args.no_wait, settings=QueueSettings.every(args.heartbeat),
        )
        summaries.append(summary)
        if budget is not None:
            budget = max(0, budget - len(summary.ran) - len(summary.failed))
    return summaries


def _report_after_runs(
    grids: list, results: Path, runs_dir: Path, root: Path, *, grids_ran: bool
) -> tuple[Path | None, str | None]:
    """(the regenerated report, None), or (None, why it failed) when cells ran: their rows are saved,
    so the command says what ran, then how the report failed. With nothing run (``--report-only``)
    the report is the whole job, so its error is the command's."""
    try:
        return _regenerate_report(grids, results, runs_dir, root), None
    except Exception as exc:
        if not grids_ran:
            raise
        report_error = f"{type(exc).__name__}: {exc}"
        print(f"damcha-ts: the report was not regenerated ({report_error}); the rows are saved in {results}. "
              "Fix the cause and rerun with --report-only.", file=sys.stderr)
        return None, report_error


def _print_outcome(args: argparse.Namespace, outcome: dict, report: Path | None, *, grids_ran: bool) -> None:
    """``--json``: the one JSON object on stdout; else a line of counts (when grids ran) and the report."""
    if args.json:
        print(json.dumps(outcome, default=str))
        return
    if grids_ran:
        print(
            f"ran {len(outcome['ran'])}, failed {len(outcome['failed'])}, already finished "
            f"{outcome['already_finished']}, still to run {outcome['remaining']}"
            + (f"; {len(outcome['failed_before'])} failed before (--retry-failed)" if outcome["failed_before"] else "")
            + (f"; running elsewhere: {len(outcome['running_elsewhere'])}" if outcome["running_elsewhere"] else "")
            + "".join(f"; {m['dataset']}: {m['filename']} missing ({m['cells']} cells skipped)"
                      for m in outcome["missing_datasets"])
            + "".join(f"; {c['dataset']}: {c['filename']} CORRUPT ({c['cells']} cells not run)"
                      for c in outcome["corrupt_datasets"])
        )
    if report is not None:
        print(f"report: {report}")


def _regenerate_report(grids: list, results: Path, runs_dir: Path, root: Path) -> Path:
    """LEADERBOARD.md and its plots beside the CSV, over every grid the report covers; those grids
    are recorded in report_grids.yaml so that the next run over any one of them keeps the others."""
    from damcha_ts.leaderboard.grid import combined_targets
    from damcha_ts.leaderboard.report import record_report_grids, write_report
    from damcha_ts.leaderboard.results import read_results
    from damcha_ts.leaderboard.runner import expected_cells, keep_missing_curves

    covered = _report_grids(grids, read_results(results), results)
    for grid in covered:
        keep_missing_curves(grid, results, runs_dir)
    rows = read_results(results)
    expected = [cell for grid in covered for cell in expected_cells(grid, runs_dir, rows)]
    report = write_report(results, results.parent / REPORT_NAME, expected=expected,
                          results_name=_display(results, root), unavailable=_unavailable(expected),
                          targets=combined_targets(covered))
    record_report_grids(results, [grid.relative_path for grid in covered])
    return report


def _unavailable(expected: list) -> dict[str, str]:
    """For the report: planned datasets whose file this machine does not have (never downloads)."""
    notes = {}
    for dataset in dict.fromkeys(cell.dataset for cell in expected):
        try:
            locate_dataset(dataset, download=False)
        except (DatasetNotFoundError, ChecksumError) as exc:
            spec = get_spec(dataset)
            problem = "failed its checksum" if isinstance(exc, ChecksumError) else "was not found"
            notes[dataset] = (
                f"`{spec.filename}` {problem} when this report was written, so these cells cannot run "
                f"here. Put it in a folder named by `DAMCHA_TS_DATA` (or pass `--data-dir`) and run the "
                f"command above; expected sha256 of the CSV: `{spec.sha256}`."
            )
    return notes


def _canonical(name: str, grids: list) -> str:
    canonical = get_spec(name).name
    if not any(canonical in grid.datasets for grid in grids):
        known = sorted({d for grid in grids for d in grid.datasets})
        raise ConfigError(f"--only-dataset {name}: no grid given has {canonical} (they have {', '.join(known)})")
    return canonical


def _known_model(label: str, grids: list) -> str:
    known = sorted({m for grid in grids for m in grid.model_labels})
    if label not in known:
        raise ConfigError(f"--only-model {label}: no grid given has this model (they have {', '.join(known)})")
    return label
