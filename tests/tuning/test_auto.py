"""``Forecaster("auto")``: a search over the baselines and the trained models within a time budget,
scored on the validation rows only (damcha_ts/tuning/auto.py). Real data: the first 700 hours of ETTh1."""

from __future__ import annotations

import json
import math
import time
import warnings

import numpy as np
import pandas as pd
import pytest

from damcha_ts import Forecaster
from damcha_ts.errors import BudgetWarning, ConfigError
from damcha_ts.tuning.auto_space import FIXED_RULES, Candidate
from damcha_ts.tuning.auto_trials import quiet_search

QUIET = {"enable_progress_bar": False, "logger": False}
# A space small enough for a test: two rules and a short linear model, one lookback.
SMALL = {"models": ["naive", "seasonal_naive", "linear"], "lookbacks": [24], "max_steps": [40], "max_trials": 1}
H = 12


@pytest.fixture(scope="module")
def etth1(data_root) -> pd.DataFrame:
    return pd.read_csv(data_root / "ETTh1.csv.gz", parse_dates=["date"], index_col="date").iloc[:700][["HUFL", "OT"]]


def auto(**keywords) -> Forecaster:
    return Forecaster("auto", horizon=H, random_state=0, trainer_kwargs=QUIET, **keywords)


def test_a_budget_too_small_for_a_trained_candidate_returns_the_best_baseline_and_says_so(etth1):
    forecaster = auto(time_budget=0.01)
    with pytest.raises(ConfigError, match="chooses its estimator in fit; fit first"):
        forecaster.estimator()
    with pytest.warns(BudgetWarning, match="no time for a trained candidate: returning the best baseline"):
        forecaster.fit(etth1)
    board = forecaster.leaderboard_
    scored = board[board.state == "COMPLETE"]
    assert sorted(scored.model) == sorted(FIXED_RULES)  # every fixed rule ran, whatever the budget
    chosen = forecaster.fit_result_["auto"]["chosen"]
    assert chosen["model"] == scored.iloc[0].model and chosen["validation_mase"] == scored.validation_mase.min()
    assert forecaster.model_config["name"] == chosen["model"]
    assert forecaster.estimator().model_config["name"] == chosen["model"]  # not the default the search started from
    assert forecaster.estimator().model_config["seq_len"] == chosen["lookback"]
    assert forecaster.predict().shape == (H, 2)


def naive_validation_mase(frame: pd.DataFrame, season: int) -> float:
    """The naive rule's MASE over every window of the validation rows of a 70/10/20 split, scaled by
    the seasonal naive MAE over the rows before the candidates' inner validation tail; by hand."""
    values = frame.to_numpy(dtype=np.float64)
    n_test, n_val = int(len(values) * 0.2), len(values) - int(len(values) * 0.7) - int(len(values) * 0.2)
    train_end = len(values) - n_test - n_val
    inner_end = train_end - max(H, int(train_end * 0.1))
    origins = range(train_end, train_end + n_val - H + 1)
    errors = np.stack([np.abs(values[o:o + H] - values[o - 1]) for o in origins])  # [windows, H, N]
    scale = np.abs(values[season:inner_end] - values[:inner_end - season]).mean(axis=0)
    return float((errors.mean(axis=(0, 1)) / scale).mean())


def test_candidates_are_scored_on_the_validation_rows_and_never_read_a_test_row(etth1):
    """The naive rule's validation MASE matches a computation by hand, and multiplying the test rows
    (the last 20 %) by 100 changes no candidate's score."""
    first = auto(time_budget=60, search=SMALL).fit(etth1)
    changed = etth1.copy()
    changed.iloc[-int(len(etth1) * 0.2):] *= 100
    second = auto(time_budget=60, search=SMALL).fit(changed)
    one, two = (f.leaderboard_.set_index("number") for f in (first, second))
    assert list(one.model) == list(two.model) and one.state.eq("COMPLETE").all()
    np.testing.assert_allclose(one.validation_mase, two.validation_mase, rtol=1e-6)
    naive = one[one.model == "naive"].validation_mase.iloc[0]
    assert naive == pytest.approx(naive_validation_mase(etth1, season=24), rel=1e-5)
    assert first.evaluate()["mase"] != pytest.approx(second.evaluate()["mase"])  # the test rows did differ


def test_a_study_kept_in_storage_continues_where_it_stopped(etth1, tmp_path):
    import optuna

    storage = tmp_path / "auto.db"
    with pytest.warns(BudgetWarning):
        first = auto(time_budget=0.01, search=SMALL, storage=storage).fit(etth1)
    before = first.leaderboard_
    assert sorted(before.model) == ["naive", "seasonal_naive"]  # the rules; the linear model was only queued
    name = first.fit_result_["auto"]["study_name"]
    (queued,) = optuna.load_study(study_name=name, storage=f"sqlite:///{storage}").get_trials()
    assert queued.state.name == "WAITING" and queued.system_attrs["fixed_params"]["model"] == "linear"

    second = auto(time_budget=60, search=SMALL, storage=storage).fit(etth1)
    after = second.leaderboard_
    assert second.fit_result_["auto"]["study_name"] == name
    # The rules keep their scores (not scored again); the queued linear model ran, as trial 0 of the study.
    rules = after[after.model != "linear"].set_index("model").validation_mase
    pd.testing.assert_series_equal(rules.sort_index(), before.set_index("model").validation_mase.sort_index())
    linear = after[after.model == "linear"]
    assert list(linear.number) == [0] and linear.state.iloc[0] == "COMPLETE" and linear.max_steps.iloc[0] == 40
    assert second.fit_result_["auto"]["chosen"]["validation_mase"] == after.validation_mase.min()


def test_many_entities_with_a_future_covariate_are_searched_as_one_panel(etth1):
    frame = etth1.reset_index()
    table = pd.concat([frame.iloc[:350].assign(store="a"), frame.iloc[350:].assign(store="b")], ignore_index=True)
    table["calendar"] = table["date"].dt.hour.astype(float)
    forecaster = auto(time_budget=60, future_covariates=["calendar"],
                      search={"models": ["naive", "itransformer_mha"], "lookbacks": [24], "max_steps": [20],
                              "d_model": [16], "max_trials": 1})
    forecaster.fit(table, entity_col="store", time_col="date")
    board = forecaster.leaderboard_
    assert list(board.model.sort_values()) == ["itransformer_mha", "naive"] and board.state.eq("COMPLETE").all()
    future = pd.DataFrame({"store": np.repeat(["a", "b"], H)})
    future["date"] = np.concatenate([forecaster.future_timestamps(table[table.store == s].date.iloc[-1]) for s in "ab"])
    future["calendar"] = future["date"].dt.hour.astype(float)
    assert len(forecaster.predict(future=future)) == 2 * H


@pytest.mark.parametrize("keywords, message", [
    ({"model": "itransformer_mha", "time_budget": 10}, "time_budget: only for model='auto'"),
    ({"model": "auto", "d_model": 64}, r"\['d_model'\] cannot be given to it"),
    ({"model": "auto", "time_budget": 0}, "time_budget must be a positive, finite number"),
    ({"model": "auto", "time_budget": float("inf")}, "time_budget must be a positive, finite number"),
    ({"model": "auto", "storage": ""}, "storage must be a SQLite file or an Optuna storage URL"),
    ({"model": "auto", "search": {"modles": ["naive"]}}, "modles"),
    ({"model": "auto", "search": {"models": ["naive", "nave"]}}, r"\['nave'\] are not models"),
    ({"model": "auto", "search": {"max_steps": [0]}}, "search.max_steps must hold positive integers"),
    ({"model": "auto", "search": {"max_steps": []}}, "search.max_steps must be a non-empty list"),
    ({"model": "auto", "search": {"learning_rate": [0, 1e-3]}}, r"search.learning_rate must be \[low, high\] with 0 < low"),
    ({"model": "auto", "search": {"learning_rate": 1e-3}}, "search.learning_rate must be a non-empty list"),
    ({"model": "auto", "search": {"dropout": [0.1, 1.5]}}, "high < 1"),
    ({"model": "auto", "search": {"lookback_multiples": ["x"]}}, "lookback_multiples must hold positive numbers"),
    ({"model": "auto", "search": {"d_model": [64, "wide"]}}, "search.d_model must hold positive integers or null"),
])
def test_search_settings_are_checked_when_the_forecaster_is_made(keywords, message):
    with pytest.raises(ConfigError, match=message):
        Forecaster(horizon=H, **keywords)


def test_a_search_file_reads_yaml_numbers_as_numbers(tmp_path):
    """YAML 1.1 reads 1e-4 as text; the space takes it as the number it is."""
    search = tmp_path / "search.yaml"
    search.write_text("learning_rate: [1e-4, 1e-3]\nmodels: [naive, linear]\n")
    space = Forecaster("auto", horizon=H, search=search)._search.space
    assert space.learning_rate == (1e-4, 1e-3) and space.models == ("naive", "linear")


def test_the_command_line_searches_prints_the_table_and_writes_a_model_that_predicts(data_root, tmp_path):
    from tests.robustness.matrix import run_cli

    data = tmp_path / "etth1.csv"
    pd.read_csv(data_root / "ETTh1.csv.gz").iloc[:700][["date", "HUFL", "OT"]].to_csv(data, index=False)
    search = tmp_path / "search.yaml"
    search.write_text("models: [naive, seasonal_naive, linear]\nlookbacks: [24]\nmax_steps: [40]\nmax_trials: 1\n")
    out = tmp_path / "run"
    done = run_cli(["fit", "--data", data, "--model", "auto", "--time-budget", "60", "--search", search,
                    "--horizon", str(H), "--out", out])
    assert done.code == 0, done.stderr
    trials = pd.read_csv(out / "auto_trials.csv")
    assert sorted(trials.model) == ["linear", "naive", "seasonal_naive"]
    best = trials.iloc[0]
    assert f"chose {best.model} (lookback 24) of 3 trials" in done.stdout and "validation_mase" in done.stdout
    assert Forecaster.load(out / "model").predict().shape == (H, 2)
    rerun = run_cli(["fit", "--data", data, "--model", "auto", "--time-budget", "60", "--out", out])
    assert rerun.code != 0 and "add --overwrite to replace it" in rerun.stderr and "--resume" not in rerun.stderr
    again = run_cli(["fit", "--data", data, "--model", "itransformer_mha", "--time-budget", "60", "--out", tmp_path / "x"])
    assert again.code != 0 and "--time-budget: only with --model auto" in again.stderr


def test_workers_run_trials_in_helper_processes_on_one_study(etth1, capfd):
    """workers=2: a spawned helper process draws and trains candidates in the same study as this one
    (a temporary SQLite file when no storage is given); the table says which process ran each. What
    the search warns of (a lookback too long) it says once, not again from the helper."""
    from damcha_ts.data.registry import DataWarning

    forecaster = auto(time_budget=120, workers=2, search={"models": ["naive", "linear"], "lookbacks": [24, 2000],
                                                          "max_steps": [40], "max_trials": 4})
    with pytest.warns(DataWarning, match=r"search.lookbacks \[2000\]"):
        forecaster.fit(etth1)
    assert "search.lookbacks [2000]" not in capfd.readouterr().err
    board = forecaster.leaderboard_
    trained = board[board.model == "linear"]
    assert (trained.state == "COMPLETE").all() and len(trained) == 4  # max_trials counts all processes together
    assert sorted(trained.worker.value_counts()) == [2, 2]
    assert forecaster.predict().shape == (H, 2)


def test_a_trial_the_budget_stops_before_it_starts_is_queued_again_for_the_next_fit(etth1, tmp_path):
    """12 s left: a trained trial would get 12 / (1 + 3) = 3 s, less than the 5 s a trial needs; it is
    recorded as PRUNED with the reason and its parameters queued, so a study continued runs it first."""
    search = auto(search=SMALL, storage=tmp_path / "auto.db")._search
    first, run = search.setup(etth1, {}, 60.0)
    study = search.study(first, run)
    run.deadline = time.monotonic() + 12.0  # whatever setting up took
    search.optimize(study, run)
    stopped, queued = study.get_trials()
    assert stopped.state.name == "PRUNED" and stopped.user_attrs["reason"] == "time budget spent"
    assert queued.state.name == "WAITING" and stopped.params["model"] == "linear"
    assert queued.system_attrs["fixed_params"] == stopped.params  # what Optuna's next trial will take


def test_a_candidate_without_a_finite_score_fails_with_its_reason_and_the_search_goes_on(etth1):
    """A column constant over the train rows has no seasonal-naive error to scale MASE by: every
    candidate's score is infinite, so each is recorded as failed, with why, and the fit says so."""
    constant = etth1.assign(HUFL=1.0)
    with pytest.raises(ConfigError, match="no candidate could be scored.*validation MASE is (inf|nan)"):
        auto(time_budget=30, search=SMALL).fit(constant)


def test_lookbacks_that_leave_no_training_window_are_refused_before_any_training(etth1):
    with pytest.raises(ConfigError, match=r"search.lookbacks \[2000\]: none leaves two training windows"):
        auto(time_budget=30, search={**SMALL, "lookbacks": [2000]}).fit(etth1)


def test_lookbacks_too_long_for_the_data_are_left_out_saying_so(etth1):
    from damcha_ts.data.registry import DataWarning

    search = auto(search={**SMALL, "lookbacks": [24, 2000, 3000]})._search
    with pytest.warns(DataWarning, match=r"search.lookbacks \[2000, 3000\]: longer than the \d+ rows candidates "
                                         r"train on allow .*; searching \[24\]"):
        _, run = search.setup(etth1, {}, 30.0)
    assert run.lookbacks == [24]


def test_fits_on_several_machines_share_one_study_through_the_storage(data_root, tmp_path, postgres_url):
    """Two separate processes (as two machines: nothing shared but the PostgreSQL database) run the same
    ``fit --model auto --storage URL`` on the same file: they join one study, each trains candidates in
    it, and the one that finishes last picks from the trials of both (the first, from those finished by then)."""
    import subprocess
    import sys
    import uuid

    data = tmp_path / "etth1.csv"
    pd.read_csv(data_root / "ETTh1.csv.gz").iloc[:700][["date", "HUFL", "OT"]].to_csv(data, index=False)
    search = tmp_path / "search.yaml"
    search.write_text("models: [naive, linear]\nlookbacks: [24]\nmax_steps: [40]\n")
    seed = str(uuid.uuid4().int % 10**6)  # a study of its own in a database other tests may share
    command = [sys.executable, "-c", "import sys; from damcha_ts.cli.main import main; sys.exit(main(sys.argv[1:]))",
               "fit", "--data", str(data), "--model", "auto", "--time-budget", "30", "--search", str(search),
               "--storage", postgres_url, "--seed", seed, "--horizon", str(H)]
    machines = [subprocess.Popen([*command, "--out", str(tmp_path / f"machine_{index}")], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for index in range(2)]
    outputs = [machine.communicate(timeout=300) for machine in machines]
    for machine, (_, stderr) in zip(machines, outputs):
        assert machine.returncode == 0, stderr
    pids = {machine.pid for machine in machines}
    workers = []
    for index, machine in enumerate(machines):
        trials = pd.read_csv(tmp_path / f"machine_{index}" / "auto_trials.csv")
        trained = trials[(trials.model == "linear") & (trials.state == "COMPLETE") & (trials.seconds > 0)]
        assert machine.pid in set(trained.worker)  # each machine trained candidates of its own
        # The machines drew different candidates (their samplers are seeded apart) and trained none twice.
        assert not trained.duplicated(subset=["lookback", "learning_rate", "max_steps"]).any()
        chosen = json.loads((tmp_path / f"machine_{index}" / "metrics.json").read_text())["chosen"]
        assert chosen["validation_mase"] == trials.validation_mase.min()
        workers.append(set(trained.worker))
    assert pids in workers  # the table of the last to finish holds the other's trials too


def test_a_candidate_another_machine_scored_meanwhile_is_not_trained_again(etth1, tmp_path):
    """While this process trains its first trial, another machine finishes a candidate this process
    has queued next: that one is answered from the shared study (its score, 0 s), not trained again."""
    import lightning as L
    import optuna

    from damcha_ts.tuning.auto_space import Candidate

    storage = tmp_path / "auto.db"
    theirs = Candidate("linear", 24, {"learning_rate": 0.002, "max_steps": 40})

    class AnotherMachine(L.Callback):
        def on_fit_end(self, trainer, pl_module) -> None:
            elsewhere = optuna.load_study(study_name=study.study_name, storage=f"sqlite:///{storage}")
            if not any(t.user_attrs.get("worker") == "machine b" for t in elsewhere.trials):
                elsewhere.add_trial(optuna.trial.create_trial(
                    value=0.5, user_attrs={"candidate": theirs.key, "worker": "machine b", "seconds": 7.0}))

    search = Forecaster("auto", horizon=H, random_state=0, storage=storage, search={**SMALL, "max_trials": 2},
                        trainer_kwargs={**QUIET, "callbacks": [AnotherMachine()]})._search
    first, run = search.setup(etth1, {}, 120.0)
    study = search.study(first, run)
    study.enqueue_trial({"model": "linear", "lookback": 24, "learning_rate": 0.001, "max_steps": 40})
    study.enqueue_trial({"model": "linear", "lookback": 24, **theirs.settings})
    search.optimize(study, run)
    mine = [t for t in study.trials if t.user_attrs.get("worker") != "machine b"]
    assert [t.state.name for t in mine] == ["COMPLETE", "COMPLETE"]
    assert mine[0].user_attrs["seconds"] > 0  # trained here
    assert (mine[1].value, mine[1].user_attrs["seconds"]) == (0.5, 0.0)  # machine b's score, nothing trained


def test_a_candidate_another_machine_is_training_is_not_trained_here_too(etth1, tmp_path):
    """Machines that draw the same candidate at the same moment (the queued first trials, which every
    machine queues): the one that finds it RUNNING elsewhere prunes its copy, with the reason, untrained."""
    import optuna

    storage = tmp_path / "auto.db"
    search = auto(search={**SMALL, "max_trials": 1}, storage=storage)._search
    first, run = search.setup(etth1, {}, 120.0)
    study = search.study(first, run)
    params = {"model": "linear", "lookback": 24, "learning_rate": 0.002, "max_steps": 40}
    elsewhere = optuna.load_study(study_name=study.study_name, storage=f"sqlite:///{storage}")
    running = elsewhere.ask()  # machine b's trial, in progress
    running.set_user_attr("candidate", json.dumps(params, sort_keys=True))
    study.enqueue_trial(params)
    search.optimize(study, run)
    (mine,) = [t for t in study.trials if t.number != running.number and t.params == params]
    assert mine.state.name == "PRUNED" and mine.user_attrs["reason"] == "being trained by another process"
    assert "seconds" not in mine.user_attrs  # nothing trained


def test_a_study_kept_in_storage_is_another_one_when_the_validation_rows_move(etth1, tmp_path):
    """The same data and test rows with another validation split is another study: its candidates'
    scores (the rules' kept in the study among them) are not taken from the first."""
    storage = tmp_path / "auto.db"
    with pytest.warns(BudgetWarning):
        first = auto(time_budget=0.01, search=SMALL, storage=storage).fit(etth1, val_size=0.1, test_size=0.2)
    with pytest.warns(BudgetWarning):
        second = auto(time_budget=0.01, search=SMALL, storage=storage).fit(etth1, val_size=0.2, test_size=0.2)
    one, two = (f.fit_result_["auto"] for f in (first, second))
    assert one["study_name"] != two["study_name"]
    naive = [f.leaderboard_.set_index("model").validation_mase["seasonal_naive"] for f in (first, second)]
    assert naive[0] != pytest.approx(naive[1])


def test_a_candidate_the_pruner_would_stop_at_its_last_step_is_scored_not_pruned(etth1):
    """Three earlier trials with a far lower inner loss at every step: the pruner says stop at each
    report. Before the last step the candidate is pruned; at its last step, trained to the end, it
    keeps its validation score (it was thrown away)."""
    import optuna

    search = auto(search=SMALL)._search
    first, run = search.setup(etth1, {}, 120.0)
    study = search.study(first, run)
    for _ in range(3):
        study.add_trial(optuna.trial.create_trial(value=0.1, intermediate_values={s: 1e-6 for s in range(0, 401, 10)}))
    panel = run.search_panel(24)
    # Trained to step 100, its last (validations at 50 and 100).
    last_only = Candidate("linear", 24, {"learning_rate": 1e-3, "max_steps": 100})
    with quiet_search():
        assert math.isfinite(search._run_trial(study.ask(), last_only, panel, run.season, 60.0))
    # Trained to step 400: at step 100 (past the pruner's warm-up) it is stopped.
    longer = Candidate("linear", 24, {"learning_rate": 1e-3, "max_steps": 400})
    with quiet_search(), pytest.raises(optuna.TrialPruned, match="pruned at step 100"):
        search._run_trial(study.ask(), longer, panel, run.season, 60.0)


def test_when_every_trained_candidate_fails_the_search_stops_and_says_why(etth1, capfd):
    """A setting every trained candidate shares is wrong (d_model 7 for 8 heads): the search stops
    after MAX_FAILURES of them in a row (it drew thousands in its budget) and returns the best rule,
    saying the candidates failed and why (it blamed the time budget), without a traceback per
    trial (Optuna logged one each, hundreds of lines)."""
    from damcha_ts.tuning.auto import MAX_FAILURES

    forecaster = auto(time_budget=60, search={"models": ["naive", "itransformer_mha"], "lookbacks": [24],
                                              "max_steps": [40], "d_model": [7]})
    with pytest.warns(BudgetWarning, match=r"every trained candidate failed \(itransformer_mha: d_model=7 must be "
                                           r"divisible by n_heads=8\): returning the best fixed rule, naive"):
        forecaster.fit(etth1)
    board = forecaster.leaderboard_
    assert (board[board.model == "itransformer_mha"].state == "FAIL").sum() == MAX_FAILURES
    assert forecaster.fit_result_["auto"]["chosen"]["model"] == "naive"
    logged = capfd.readouterr().err
    assert "Traceback" not in logged and "failed with" not in logged
