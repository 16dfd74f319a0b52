"""Entry point of one worker process: ``python -m damcha_ts.tuning.worker SPEC.json INDEX``.

:func:`damcha_ts.tuning.study.run_study` writes the spec and starts ``--workers`` of these; each
claims the launch's waiting trials from the shared storage, runs them, and exits 0 when none is left.
"""

from __future__ import annotations

import sys

from damcha_ts.workqueue.launcher import worker_arguments


def main(argv: list[str] | None = None) -> int:
    started = worker_arguments("damcha_ts.tuning.worker", argv)
    if started is None:
        return 2
    import optuna

    from damcha_ts.tuning.study import run_worker

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    run_worker(*started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
