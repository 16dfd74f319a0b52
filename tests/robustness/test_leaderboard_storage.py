"""The leaderboard's committed report and data files, and Optuna storage URLs.

Matrix rows: what the user runs → what ``damcha-ts leaderboard`` / ``damcha-ts tune`` says, and what
must hold afterwards: a run over one grid keeps the other grids' sections, a run that trains nothing
changes no file, a data file that fails its checksum is an error (both digests named) while a missing
one is skipped, and no credential of a ``--storage`` URL is ever shown or written. A read-only SQLite
storage is named in one line by ``leaderboard`` and ``tune`` (and ``--status`` still reads it), a
journal storage frees the cell of a SIGKILLed worker, and a tune summary counts and lists the trials
still RUNNING or WAITING.
Every leaderboard case writes into its own results folder (``--results``), never into benchmarks/results.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import pytest
import yaml

from matrix import Case, check_case, run_cli
from damcha_ts.data import get_spec

ROOT = Path(__file__).resolve().parents[2]
GRIDS = ROOT / "configs" / "leaderboard"
SMOKE, TRAFFIC = GRIDS / "smoke.yaml", GRIDS / "traffic.yaml"
SECRET = "s3cr3tPW"  # in every storage URL below: it must appear in no output and no file

# A "corrupted ETTh1.csv.gz": a real gzip whose CSV is not the benchmark's.
CORRUPT_CSV = b"date,HUFL,HULL,MUFL,MULL,LUFL,LULL,OT\n2016-07-01 00:00:00,5.8,2.0,1.5,0.4,4.2,1.3,30.5\n"
CORRUPT_DIGESTS = f"expected sha256 {get_spec('ETTh1').sha256}, got {hashlib.sha256(CORRUPT_CSV).hexdigest()}"


# --- the leaderboard ---------------------------------------------------------------------------


def _leaderboard(folder: Path, grid: Path, *extra: str) -> list[str]:
    return ["leaderboard", "--config", grid, "--results", folder / "results" / "leaderboard.csv",
            "--runs-dir", folder / "runs", *extra]


@pytest.fixture(scope="module")
def reported_results(tmp_path_factory, data_root) -> Path:
    """A results folder as a user's would be: the Traffic grid reported (no rows: its data file is
    not redistributed), then one smoke cell (a naive forecast on ETTh1, seconds) trained into it."""
    folder = tmp_path_factory.mktemp("leaderboard")
    for argv in (_leaderboard(folder, TRAFFIC, "--report-only"),
                 _leaderboard(folder, SMOKE, "--only-model", "repeat_last", "--data-dir", data_root)):
        outcome = run_cli(argv)
        assert outcome.code == 0, outcome.stderr
    return folder


def _copy_results(folder: Path, fixtures: dict) -> None:
    shutil.copytree(fixtures["reported_results"] / "results", folder / "results")


def _snapshot(results: Path) -> dict[str, list]:
    """Every file of a results folder: its digest and modification time (a rewrite changes the latter)."""
    return {str(p.relative_to(results)): [hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns]
            for p in sorted(results.rglob("*")) if p.is_file()}


def _train_another_cell(folder: Path, fixtures: dict) -> list[str]:
    _copy_results(folder, fixtures)
    return _leaderboard(folder, SMOKE, "--only-model", "window_mean", "--data-dir", fixtures["data_root"])


def _keeps_every_grid(folder: Path) -> None:
    report = (folder / "results" / "LEADERBOARD.md").read_text()
    assert "## ETTh1" in report and "window_mean" in report  # the cell just trained
    assert "## Traffic" in report and "configs/leaderboard/traffic.yaml --only-dataset Traffic" in report
    listed = yaml.safe_load((folder / "results" / "report_grids.yaml").read_text())["grids"]
    assert listed == ["configs/leaderboard/traffic.yaml", "configs/leaderboard/smoke.yaml"]


def _rerun_finished_cell(folder: Path, fixtures: dict) -> list[str]:
    _copy_results(folder, fixtures)
    (folder / "before.json").write_text(json.dumps(_snapshot(folder / "results")))
    return _leaderboard(folder, SMOKE, "--only-model", "repeat_last", "--data-dir", fixtures["data_root"])


def _nothing_changed(folder: Path) -> None:
    assert _snapshot(folder / "results") == json.loads((folder / "before.json").read_text())


def _data_folder(folder: Path, corrupt: bool) -> Path:
    data = folder / "data"
    data.mkdir()
    if corrupt:
        (data / "ETTh1.csv.gz").write_bytes(gzip.compress(CORRUPT_CSV))
    return data


def _broken_curves(folder: Path, fixtures: dict) -> list[str]:
    _copy_results(folder, fixtures)
    (folder / "results" / "curves.json").write_text('[{"dataset": "ETTh1", ', encoding="utf-8")  # cut off
    return _leaderboard(folder, SMOKE, "--data-dir", fixtures["data_root"])


def _storage_with_a_foreign_study(folder: Path, fixtures: dict) -> list[str]:
    import optuna

    url = f"sqlite:///{folder / 'other.db'}"
    optuna.create_study(study_name="leaderboard:configs/leaderboard/smoke.yaml", storage=url,
                        directions=["minimize", "maximize"])
    return _leaderboard(folder, SMOKE, "--storage", url, "--data-dir", fixtures["data_root"])


def _smoke_on(folder: Path, corrupt: bool) -> list[str]:
    return _leaderboard(folder, SMOKE, "--data-dir", _data_folder(folder, corrupt), "--no-download")


def _nothing_written(folder: Path) -> None:
    """No CSV, report or plot; at most the grid's queue (leaderboard.db), and nothing queued in it."""
    import sqlite3
    from contextlib import closing

    results = folder / "results"
    files = sorted(p.name for p in results.iterdir()) if results.exists() else []
    assert files in ([], ["leaderboard.db"])
    if files:
        with closing(sqlite3.connect(results / "leaderboard.db")) as connection:
            assert connection.execute("SELECT count(*) FROM trials").fetchone() == (0,)


def _report_grids_file(content: str):
    """A user's results folder whose report_grids.yaml holds ``content``; the report is regenerated."""

    def make(folder: Path, fixtures: dict) -> list[str]:
        _copy_results(folder, fixtures)
        (folder / "results" / "report_grids.yaml").write_text(content)
        (folder / "before.json").write_text(json.dumps(_snapshot(folder / "results")))
        return _leaderboard(folder, SMOKE, "--report-only")

    return make


# --- storage URLs --------------------------------------------------------------------------------


TINY_RUN_CONFIG = {
    "data": {"dataset": "ETTh1", "seq_len": 48, "pred_len": 24},
    "model": {"name": "itransformer_damcha", "d_model": 16, "d_ff": 16, "e_layers": 1, "n_heads": 2,
              "generator_hidden": [8]},
    "training": {"max_epochs": 1, "patience": 1},
}
TINY_SEARCH = {
    "trainer": {"limit_train_batches": 2, "limit_val_batches": 1},
    "space": {"training.learning_rate": {"type": "float", "low": 1.0e-4, "high": 1.0e-2, "log": True}},
}


def _tune(storage: str):
    def make(folder: Path, fixtures: dict) -> list[str]:
        (folder / "run.yaml").write_text(yaml.safe_dump(TINY_RUN_CONFIG))
        (folder / "search.yaml").write_text(yaml.safe_dump(TINY_SEARCH))
        return ["tune", "--config", folder / "run.yaml", "--search", folder / "search.yaml", "--n-trials", "1",
                "--no-test", "--out", folder / "study", "--storage", storage]

    return make


def _no_study_folder(folder: Path) -> None:
    assert not (folder / "study").exists()  # refused before anything was written


# A closed local port: the driver fails at once ("Connection refused"), after the URL was parsed.
CLOSED = "127.0.0.1:1"


def _read_only_storage(folder: Path) -> str:
    """A leaderboard storage with the smoke grid's repeat_last cell waiting, opened read-only: SQLite's
    ``mode=ro`` refuses every write, as root too (who writes a chmod 0444 file all the same)."""
    from damcha_ts.leaderboard.cells import resolve_cell
    from damcha_ts.leaderboard.grid import load_grid
    from damcha_ts.leaderboard.queue import enqueue_cells, open_grid_study, open_leaderboard_storage

    grid, database = load_grid(SMOKE), folder / "results" / "leaderboard.db"
    study = open_grid_study(open_leaderboard_storage(f"sqlite:///{database}"), grid.relative_path)
    enqueue_cells(study, [resolve_cell(c, grid, folder / "runs") for c in grid.cells(only_models=("repeat_last",))])
    (folder / "before.json").write_text(json.dumps(_snapshot(folder / "results")))
    return f"sqlite:///file:{database}?mode=ro&uri=true"


def _read_only_leaderboard(*extra: str):
    def make(folder: Path, fixtures: dict) -> list[str]:
        return _leaderboard(folder, SMOKE, "--storage", _read_only_storage(folder), "--no-download", *extra)

    return make


def _tune_on_read_only_storage(folder: Path, fixtures: dict) -> list[str]:
    argv = _tune("")(folder, fixtures)
    argv[-1] = _read_only_storage(folder)
    return argv


def _study_with_unfinished_trials(folder: Path, fixtures: dict) -> list[str]:
    """A study whose trial 0 is stuck RUNNING (its worker on another machine, gone) and trial 1 WAITING;
    ``tune --n-trials 0`` only reports it."""
    import optuna

    url = f"sqlite:///{folder / 'stuck.db'}"
    study = optuna.create_study(study_name="stuck", storage=url)
    study.ask().set_user_attr("worker", "otherhost:4242")
    study.enqueue_trial({})
    argv = [*_tune(url)(folder, fixtures), "--study-name", "stuck"]
    argv[argv.index("--n-trials") + 1] = "0"
    return argv


def _report_lists_unfinished_trials(folder: Path) -> None:
    report = (folder / "study" / "report.md").read_text()
    assert "| running | waiting |\n|---|---|---|---|---|---|\n| 2 | 0 | 0 | 0 | 1 | 1 |" in report
    assert "## 2 trials not finished" in report
    assert "| 0 | RUNNING | otherhost:4242 |" in report and "| 1 | WAITING |  |  |  |" in report
    summary = json.loads((folder / "study" / "summary.json").read_text())
    assert (summary["n_trials"], summary["n_running"], summary["n_waiting"]) == (2, 1, 1)


def _storage_untouched(folder: Path) -> None:
    """The read-only storage (and everything beside it) as it was; no folder named after its URI."""
    _nothing_changed(folder)
    assert not list(folder.parent.rglob("file:*"))

CASES = [
    Case("leaderboard_run_over_one_grid_keeps_the_other_grids_sections", _train_another_cell, 0,
         "ran 1, failed 0", after=_keeps_every_grid, stream="stdout"),
    Case("leaderboard_run_that_trains_nothing_changes_no_file", _rerun_finished_cell, 0,
         "nothing to run; report left as it is", after=_nothing_changed),
    Case("leaderboard_corrupt_data_file_is_an_error_naming_both_digests", lambda f, _: _smoke_on(f, corrupt=True),
         1, CORRUPT_DIGESTS, after=_nothing_written),
    Case("leaderboard_missing_data_file_is_skipped_and_writes_nothing", lambda f, _: _smoke_on(f, corrupt=False),
         0, "the data file ETTh1.csv is missing", after=_nothing_written),
    Case("leaderboard_run_with_curves_json_cut_off_names_it", _broken_curves, 2,
         "curves.json: not valid JSON"),
    Case("leaderboard_run_on_a_storage_holding_a_foreign_study_of_the_grid_name_is_refused", _storage_with_a_foreign_study, 2,
         "with 2 objectives, so it is not this grid's; use another --storage"),
    Case("report_grids_yaml_that_is_not_yaml_is_named", _report_grids_file("grids: [a, b\n"), 2,
         "report_grids.yaml: not valid YAML", after=_nothing_changed),
    Case("report_grids_yaml_without_a_list_is_named", _report_grids_file("grids: 5\n"), 2,
         "report_grids.yaml: expected 'grids:' with a list of grid files", after=_nothing_changed),
    Case("report_grids_yaml_empty_is_named", _report_grids_file(""), 2,
         "report_grids.yaml: expected 'grids:' with a list of grid files", after=_nothing_changed),
    Case("report_grids_yaml_naming_a_missing_grid_says_so_and_reports_the_rest",
         _report_grids_file("grids: [configs/leaderboard/no_such_grid.yaml, configs/leaderboard/traffic.yaml]\n"), 0,
         "lists configs/leaderboard/no_such_grid.yaml, which is not a file"),
    Case("storage_password_in_the_query_string_is_hidden",
         _tune(f"postgresql+psycopg2://u@{CLOSED}/db?password={SECRET}"), 2,
         f"storage 'postgresql+psycopg2://u@{CLOSED}/db?password=***' cannot be opened"),
    Case("storage_sslpassword_and_a_token_are_hidden",
         _tune(f"postgresql+psycopg2://u@{CLOSED}/db?sslpassword={SECRET}&sslmode=disable&api_token={SECRET}x"), 2,
         f"?sslpassword=***&sslmode=disable&api_token=***' cannot be opened"),
    Case("storage_pwd_the_driver_rejects_is_hidden_in_its_error",
         _tune(f"postgresql+psycopg2://u@{CLOSED}/db?pwd={SECRET}"), 2,
         'db?pwd=***\' cannot be opened: invalid dsn: invalid connection option "pwd"'),
    Case("storage_percent_encoded_password_key_is_hidden",
         _tune(f"postgresql+psycopg2://u@{CLOSED}/db?pass%77ord={SECRET}"), 2, "db?pass%77ord=***' cannot be opened"),
    Case("storage_user_info_password_with_a_slash_is_hidden",
         _tune(f"postgresql+psycopg2://u:{SECRET}/x@{CLOSED}/db"), 2,
         f"storage 'postgresql+psycopg2://u:***@{CLOSED}/db' cannot be opened"),
    Case("storage_user_info_password_with_a_raw_at_sign_is_hidden_whole",
         _tune(f"postgresql+psycopg2://u:{SECRET}@x@{CLOSED}/db"), 2,
         f"storage 'postgresql+psycopg2://u:***@{CLOSED}/db' cannot be opened"),
    Case("storage_sqlite_with_two_slashes_says_how_to_write_it",
         _tune("sqlite://leaderboard.db"), 2,
         "a SQLite file is written with three slashes, sqlite:///leaderboard.db", after=_no_study_folder),
    Case("storage_read_only_sqlite_is_named_by_leaderboard_without_a_traceback", _read_only_leaderboard(), 2,
         "leaderboard.db is read-only (the URL opens it read-only: mode=ro or immutable=1); a run writes its "
         "trials there, so make it writable or give another --storage", after=_storage_untouched),
    Case("storage_read_only_sqlite_is_named_by_tune_without_a_traceback", _tune_on_read_only_storage, 2,
         "leaderboard.db is read-only (the URL opens it read-only",
         after=lambda folder: (_storage_untouched(folder), _no_study_folder(folder))),
    Case("storage_read_only_sqlite_still_answers_leaderboard_status", _read_only_leaderboard("--status"), 0,
         "4 cells: 0 done, 0 running, 1 waiting, 0 failed, 3 not queued yet", after=_storage_untouched,
         stream="stdout"),
    Case("tune_summary_counts_and_lists_a_trial_stuck_running_and_one_waiting", _study_with_unfinished_trials, 0,
         "study stuck: 2 trials (0 complete, 0 pruned, 0 failed, 1 running, 1 waiting)",
         after=_report_lists_unfinished_trials, stream="stdout"),
    Case("storage_bad_port_is_named_before_anything_runs",
         _tune(f"postgresql+psycopg2://u:{SECRET}@db.example.org:notaport/db"), 2,
         "--storage 'postgresql+psycopg2://u:***@db.example.org:notaport/db': the port 'notaport' is not a number",
         after=_no_study_folder),
]


def _files_holding(folder: Path, text: str) -> list[str]:
    return [str(p) for p in folder.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_matrix(case, tmp_path, request, monkeypatch):
    # No dataset from the user cache (a case's data folder is all it may find), and a --data-dir
    # (which sets DAMCHA_TS_DATA in this process) does not outlive its case.
    monkeypatch.setenv("DAMCHA_TS_CACHE", str(tmp_path / "empty_cache"))
    monkeypatch.setenv("DAMCHA_TS_DATA", os.environ.get("DAMCHA_TS_DATA", str(tmp_path / "no_data")))
    monkeypatch.chdir(tmp_path)  # whatever a case writes beside it lands here, never in the checkout
    fixtures = {}
    if case.name.startswith(("leaderboard_run", "report_grids")):  # the cases that use a results folder
        fixtures = {name: request.getfixturevalue(name) for name in ("reported_results", "data_root")}
    outcome = check_case(case, tmp_path / "case", fixtures)
    assert SECRET not in outcome.stdout + outcome.stderr
    assert _files_holding(tmp_path, SECRET) == []


def test_the_committed_report_covers_every_grid_it_names():
    """benchmarks/results/report_grids.yaml lists every grid LEADERBOARD.md has a "Reproduce:" line for,
    so a run over one of them regenerates the report with all its sections."""
    import re

    results = ROOT / "benchmarks" / "results"
    report = (results / "LEADERBOARD.md").read_text()
    named = set(re.findall(r"^Reproduce: `damcha-ts leaderboard --config (\S+)", report, flags=re.MULTILINE))
    listed = yaml.safe_load((results / "report_grids.yaml").read_text())["grids"]
    assert named and set(listed) == named and all((ROOT / name).is_file() for name in listed)


def test_every_credential_form_is_hidden_in_urls_and_driver_errors():
    """display_url and hide_secrets on the forms SQLAlchemy accepts (the matrix shows them end to end)."""
    from damcha_ts.workqueue.storage import display_url, hide_secrets

    for url, shown in (
        (f"postgresql+psycopg2://alice:{SECRET}@db:5432/optuna", "postgresql+psycopg2://alice:***@db:5432/optuna"),
        (f"mysql+pymysql://alice:p%40{SECRET}@db/optuna", "mysql+pymysql://alice:***@db/optuna"),
        (f"postgresql://db/x?passwd={SECRET}&password={SECRET}&PWD={SECRET}&application_name=a",
         "postgresql://db/x?passwd=***&password=***&PWD=***&application_name=a"),
        (f"postgresql://db/x?client_secret={SECRET}&sslkey={SECRET}&auth={SECRET}",
         "postgresql://db/x?client_secret=***&sslkey=***&auth=***"),
        ("postgresql://alice@db:5432/x?sslmode=require", "postgresql://alice@db:5432/x?sslmode=require"),
        ("journal:///studies/a:b@c.log", "journal:///studies/a:b@c.log"),
        (f"postgresql+psycopg2://alice:{SECRET}?x#y@db/optuna", "postgresql+psycopg2://alice:***@db/optuna"),
        (f"postgresql+psycopg2://alice:{SECRET}@x@db/optuna", "postgresql+psycopg2://alice:***@db/optuna"),
    ):
        assert display_url(url) == shown
    # libpq echoes the part of a DSN value it cannot parse: that word is hidden too.
    dsn = f"postgresql+psycopg2://u@db/x?dsn=password%3D{SECRET}%20broken{SECRET}"
    echoed = f'invalid dsn: missing "=" after "broken{SECRET}" in connection info string ({dsn})'
    hidden = hide_secrets(echoed, dsn)
    assert SECRET not in hidden and 'after "***" in connection info string' in hidden


# --- a journal storage and a worker killed with SIGKILL -------------------------------------------


def _journal_trials(journal: Path, grid_column: str) -> list:
    """The grid's trials in a journal file, read as another process sees them (none before it exists)."""
    import optuna
    from optuna.storages.journal import JournalFileBackend

    from damcha_ts.leaderboard.queue import study_name

    if not journal.is_file():
        return []
    storage = optuna.storages.JournalStorage(JournalFileBackend(str(journal)))
    try:
        return optuna.load_study(study_name=study_name(grid_column), storage=storage).get_trials(deepcopy=False)
    except KeyError:  # the study is not created yet
        return []


@pytest.mark.timeout(300)
def test_a_journal_storage_frees_the_cell_of_a_sigkilled_worker(tmp_path, data_root, monkeypatch):
    """Issue 32 #7: on a journal file (Optuna keeps no heartbeat there) a SIGKILLed worker's cell stayed
    RUNNING for ever and no rerun, --retry-failed included, ran it again. Now the worker beats in the
    journal too: the rerun of the same command fails the dead worker's trial once its beats are 3 s
    old (--heartbeat 1) and runs the storage's retry copy of the cell."""
    import signal
    import subprocess
    import sys
    import time

    from damcha_ts.leaderboard import cells as cells_module
    from damcha_ts.leaderboard.grid import load_grid
    from damcha_ts.leaderboard.results import read_results
    from tests.leaderboard.test_leaderboard_runner import _fake_row

    grid_path = tmp_path / "journal_grid.yaml"
    smoke = yaml.safe_load(SMOKE.read_text())
    grid_path.write_text(yaml.safe_dump({**smoke, "naive": [], "models": [{"name": "itransformer_mha"}],
                                         "overrides": [*smoke["overrides"], "training.max_epochs=50"],
                                         "trainer": {"limit_train_batches": 200, "limit_val_batches": 4}}))
    grid, journal, results = load_grid(grid_path), tmp_path / "cells.log", tmp_path / "results" / "leaderboard.csv"
    argv = ["leaderboard", "--config", grid_path, "--results", results, "--runs-dir", tmp_path / "runs",
            "--storage", journal, "--heartbeat", "1"]
    worker = subprocess.Popen([sys.executable, "-m", "damcha_ts.cli.main", *map(str, argv)],
                              env={**os.environ, "OMP_NUM_THREADS": "1", "DAMCHA_TS_DATA": str(data_root)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while not [t for t in _journal_trials(journal, grid.relative_path)
                   if t.state.name == "RUNNING" and "worker" in t.user_attrs]:
            assert worker.poll() is None and time.monotonic() < deadline, "the cell never started"
            time.sleep(0.1)
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    (killed,) = _journal_trials(journal, grid.relative_path)
    assert killed.state.name == "RUNNING"  # nobody is left to finish it
    time.sleep(3.5)  # past the grace period (3 beats of 1 s) since its last beat

    # The rerun of the same command; the cell itself is faked: what is tested is that it runs again.
    monkeypatch.setattr(cells_module, "run_cell", lambda item, trainer_kwargs: _fake_row(item))
    monkeypatch.setenv("DAMCHA_TS_DATA", str(data_root))
    outcome = run_cli(argv)
    assert outcome.code == 0, outcome.stderr
    assert "ran 1, failed 0, already finished 0, still to run 0" in outcome.stdout, outcome.stdout + outcome.stderr
    stale, retry = _journal_trials(journal, grid.relative_path)
    assert stale.number == killed.number and stale.state.name == "FAIL" and "error" not in stale.user_attrs
    assert retry.state.name == "COMPLETE" and retry.system_attrs["failed_trial"] == killed.number
    assert [row["model"] for row in read_results(results)] == ["itransformer_mha"]


@pytest.mark.parametrize("beat", ["yesterday", None, True, [1.0]], ids=["text", "null", "bool", "list"])
def test_a_journal_heartbeat_that_is_no_number_is_ignored_not_a_traceback(tmp_path, beat):
    """The heartbeat of a journal trial is a value in a file anyone can edit: one that is no number
    is no beat to judge by (every worker's stale check used to die on float('yesterday')); a real
    stale beat beside it is still found."""
    import optuna

    from damcha_ts.workqueue.storage import JOURNAL_HEARTBEAT_ATTR, JOURNAL_PREFIX, open_storage

    storage = open_storage(f"{JOURNAL_PREFIX}{tmp_path / 'journal.log'}", heartbeat_interval=1, grace_period=2,
                           max_retry=0)
    study = optuna.create_study(storage=storage, study_name="s")
    odd, stale = study.ask(), study.ask()
    storage.set_trial_system_attr(odd._trial_id, JOURNAL_HEARTBEAT_ATTR, beat)
    storage.set_trial_system_attr(stale._trial_id, JOURNAL_HEARTBEAT_ATTR, 0.0)
    assert storage._get_stale_trial_ids(study._study_id) == []  # both started just now: within the grace period
    time.sleep(2.5)
    assert storage._get_stale_trial_ids(study._study_id) == [stale._trial_id]
