"""report.md of a study, from an in-memory Optuna study (no training): its sections, in order, and tables."""

from __future__ import annotations


def _study(with_trials: bool):
    import optuna
    from optuna.distributions import FloatDistribution, IntDistribution
    from optuna.trial import TrialState, create_trial

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize")
    distributions = {"lr": FloatDistribution(1e-5, 1e-2, log=True), "d": IntDistribution(16, 128)}
    for i in range(6 if with_trials else 0):
        pruned = i % 3 == 2
        study.add_trial(create_trial(
            state=TrialState.PRUNED if pruned else TrialState.COMPLETE, value=None if pruned else 0.5 - i / 100,
            params={"lr": 1e-3 * (i + 1), "d": 16 * (i + 1)}, distributions=distributions,
            intermediate_values={0: 0.7 - i / 100, 1: 0.6 - i / 100}, user_attrs={"epochs_run": 2}))
    if with_trials:
        study.set_user_attr("invocations", [
            {"command": "damcha-ts tune a", "started": "t0", "trials_before": 0, "n_trials": 3, "launch_token": 11},
            {"command": "damcha-ts tune b", "started": "t1", "trials_before": 3, "n_trials": 3, "launch_token": 12}])
    return study


def _write(tmp_path, with_trials: bool) -> str:
    from damcha_ts.tuning.report import write_report
    from damcha_ts.tuning.result import StudyResult
    from damcha_ts.tuning.space import SearchSpec

    study = _study(with_trials)
    best = study.best_trial if with_trials else None
    spec = SearchSpec(source="s.yaml", params=(), study_name="s", pruner_arguments={"n_startup_trials": 2},
                      trainer_kwargs={"limit_train_batches": 2}, raw={"space": {"lr": {"low": 1e-5, "high": 1e-2}}})
    metrics = {"val_mse": 0.4, "mse": 0.41, "mae": 0.42, "epochs_run": 3, "n_params": 12345}
    result = StudyResult(
        "s", "sqlite:///x.db", str(tmp_path), len(study.trials), 4 if best else 0, 2 if best else 0, 0, 0,
        best.value if best else None, best.params if best else {}, best.number if best else None,
        best_config=str(tmp_path / "best.yaml") if best else None, tuned=metrics if best else None,
    )
    path = write_report(study, spec, result, tmp_path, command="damcha-ts tune x" if with_trials else None)
    for png in ("optimization_history.png", "intermediate_values.png", "param_importances.png"):
        assert (tmp_path / png).stat().st_size > 1000
    return path.read_text()


def test_report_of_a_study_lists_its_sections_in_order(tmp_path):
    report = _write(tmp_path, with_trials=True)
    headings = [line for line in report.splitlines() if line.startswith("#")]
    assert headings == ["# Optuna study `s`", "## Best trial", "## Tuned vs default config (each trained once more, "
                        "then tested once)", "## Plots", "## Parameter importances (PED-ANOVA)",
                        "## Best 4 complete trials", "## Search space"]
    assert "Command: `damcha-ts tune x`" in report
    assert "2. `damcha-ts tune b` (t1): 3 trials before, 3 added, launch token 12" in report
    assert "(launch tokens 11, 12)" in report and "pruner: median (n_startup_trials=2)" in report
    assert "| 6 | 4 | 2 | 0 | 0 |" in report
    assert "Trial 4: validation MSE **0.460000**. Its full run config: [`best.yaml`](best.yaml)." in report
    assert "| tuned (best trial) | 0.4000 | 0.4100 | 0.4200 | 3 | 12,345 |" in report
    assert "default (base config)" not in report  # not trained: no row
    ranked = [line.split(" | ")[0] for line in report.split("## Best 4 complete trials")[1].splitlines()
              if line.startswith("| ") and "val MSE" not in line]
    assert ranked == ["| 4", "| 3", "| 1", "| 0"]  # lowest validation MSE first, pruned trials left out
    assert report.endswith("```yaml\nspace:\n  lr: {low: 1.0e-05, high: 0.01}\n```\n")


def test_report_of_an_empty_study_says_what_is_not_there_yet(tmp_path):
    report = _write(tmp_path, with_trials=False)
    assert "No trial completed yet, so there is no best config." in report
    assert "## Best trial" not in report and "## Tuned vs default" not in report
    assert "Not available: needs at least 2 complete trials (have 0)." in report
    assert "## Best 0 complete trials" in report and "(not recorded)" in report
