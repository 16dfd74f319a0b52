"""One Optuna trial: sample a config, train it with pruning, return the best validation MSE.

The test split is never touched here (``forecasting.experiment.run_experiment(..., evaluate_test=False)``): a study
selects on validation only, and the chosen config is tested once afterwards.
"""

from __future__ import annotations

import math
import os
import shutil
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from damcha_ts.training import RunConfig
from damcha_ts.training.config import parse_override
from damcha_ts.tuning.space import SearchSpec, as_updates

LAUNCH_ATTR = "launch_token"  # user attribute of a trial: the launch it belongs to (its budget)

TRIALS_DIR = "trials"
# Per-trial outputs that are large and not needed after the trial (the best config is retrained).
_BULKY_OUTPUTS = ("checkpoints", "model")
# Facts about each finished run kept on the trial, for the report.
_RUN_FACTS = ("epochs_run", "best_epoch", "n_params", "seconds_per_epoch", "wall_seconds", "config_hash")


def trial_dir(out_dir: str | Path, number: int) -> Path:
    return Path(out_dir) / TRIALS_DIR / f"trial_{number:05d}"


def jsonable(value: Any) -> Any:
    """Config values as JSON data (Optuna keeps user attributes as JSON)."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


@dataclass(frozen=True)
class BaseConfig:
    """The run config every trial starts from: ``--config`` plus ``--horizon`` and ``--set``.

    ``source`` is a YAML path (made absolute, so worker processes anywhere find it), a shipped
    config name, or a dict; it travels to worker processes as JSON data.
    """

    source: str | dict
    horizon: int | None = None
    overrides: tuple[str, ...] = ()

    @classmethod
    def of(
        cls, source: str | Path | Mapping, horizon: int | None = None, overrides: Sequence[str] = ()
    ) -> BaseConfig:
        if isinstance(source, Mapping):
            return cls(jsonable(source), horizon, tuple(overrides))
        path = Path(source)
        return cls(str(path.resolve()) if path.is_file() else str(source), horizon, tuple(overrides))

    def resolve_run(self, values: Mapping[str, Any] | None = None):
        """The :class:`RunConfig` with a trial's ``{path: value}`` applied over ``--set``."""
        given = {".".join(place): value for place, value in map(parse_override, self.overrides)}
        updates = as_updates({**given, **(values or {})})  # the trial's values win over --set
        return RunConfig.load(self.source, horizon=self.horizon, updates=updates)

    def resolve(self, values: Mapping[str, Any] | None = None, complete: bool = False) -> dict:
        """The resolved run config (dict form) with a trial's ``{path: value}`` applied over ``--set``;
        ``complete`` keeps the newer keys that sit at their default (a search must see them)."""
        return self.resolve_run(values).to_dict(complete)


def make_pruning_callback(trial):
    """Optuna's Lightning pruning callback on ``val_loss`` that also remembers its decision.

    The callback raises ``optuna.TrialPruned`` from inside ``Trainer.fit``. Remembering the
    decision lets the objective re-raise it even if a layer between here and Lightning caught the
    exception (as GluonTS's trainer does, ecosystem.md §1.7).
    """
    import optuna
    from optuna_integration import PyTorchLightningPruningCallback

    class RecordingPruningCallback(PyTorchLightningPruningCallback):
        pruned_message: str | None = None

        def on_validation_end(self, trainer, pl_module) -> None:
            try:
                super().on_validation_end(trainer, pl_module)
            except optuna.TrialPruned as exc:
                self.pruned_message = str(exc)
                raise

    return RecordingPruningCallback(trial, monitor="val_loss")


def one_device_per_run(config: Mapping, trainer_kwargs: Mapping) -> dict:
    """Lightning arguments for one trial (or the final test): a single device unless the config or
    ``--trainer`` asks for more. ``devices="auto"`` would start DDP over every visible GPU inside
    each trial, and Lightning's DDP launcher re-runs the whole tuning command once per extra rank;
    several GPUs are used by running one worker per GPU instead."""
    if "devices" in trainer_kwargs or config["training"].get("devices", "auto") != "auto":
        return dict(trainer_kwargs)
    return {**trainer_kwargs, "devices": 1}


class TrialObjective:
    """The objective a worker optimises: ``objective(trial) -> best validation MSE``.

    Args:
        base: the run config every trial starts from.
        search: the search space and the Lightning arguments of every run.
        out_dir: the study folder; each trial trains in ``trials/trial_NNNNN``.
        trainer_kwargs: extra ``L.Trainer`` arguments, over the search file's ``trainer``.
        worker: a label stored on each trial (host:pid), to see which worker ran it.
        launch_token: the launch's token (see ``damcha_ts.tuning.study.worker_seed``), stored on
            each trial, so a trial's launch and a launch's trials can be told.
    """

    def __init__(
        self,
        base: BaseConfig,
        search: SearchSpec,
        out_dir: str | Path,
        *,
        trainer_kwargs: Mapping | None = None,
        worker: str | None = None,
        launch_token: int | None = None,
    ) -> None:
        self.base = base
        self.base_config = base.resolve()  # read by the search's ``when`` conditions
        self.search = search
        self.out_dir = Path(out_dir)
        self.trainer_kwargs = {**search.trainer_kwargs, **(trainer_kwargs or {})}
        self.worker = worker or f"{socket.gethostname()}:{os.getpid()}"
        self.launch_token = launch_token

    def __call__(self, trial) -> float:
        import optuna

        from damcha_ts.forecasting.experiment import run_experiment

        run = self.base.resolve_run(self.search.sample(trial, self.base_config, self.base.resolve))
        config = run.to_dict()
        trial.set_user_attr("config", jsonable(config))
        trial.set_user_attr("worker", self.worker)
        if self.launch_token is not None and LAUNCH_ATTR not in trial.user_attrs:
            trial.set_user_attr(LAUNCH_ATTR, self.launch_token)  # a queued trial has its launch's already

        pruning = make_pruning_callback(trial)
        run_dir = trial_dir(self.out_dir, trial.number)
        try:
            result = run_experiment(run, run_dir, evaluate_test=False, callbacks=[pruning], progress=False,
                                    trainer_kwargs=one_device_per_run(config, self.trainer_kwargs))
        finally:
            for name in _BULKY_OUTPUTS:
                shutil.rmtree(run_dir / name, ignore_errors=True)
        pruning.check_pruned()  # only acts under DDP, where the decision travels via storage
        if pruning.pruned_message is not None:
            raise optuna.TrialPruned(pruning.pruned_message)

        for key in _RUN_FACTS:
            if key in result:
                trial.set_user_attr(key, jsonable(result[key]))
        value = float(result["best_val_loss"])
        # Optuna records a NaN objective as a FAILED trial (a diverged run), which is what we want.
        return value if math.isfinite(value) else float("nan")
