"""Entry point of one worker process: ``python -m damcha_ts.tuning.worker SPEC.json INDEX``.

:func:`damcha_ts.tuning.study.run_study` writes the spec and starts ``--workers`` of these; each
claims the launch's waiting trials from the shared storage, runs them, and exits 0 when none is left.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m damcha_ts.tuning.worker SPEC.json INDEX", file=sys.stderr)
        return 2
    import optuna

    from damcha_ts.tuning.study import run_worker
    from damcha_ts.workqueue.launcher import read_spec, stop_on_sigterm

    stop_on_sigterm()  # a stopped worker's trial goes back to the queue
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spec = read_spec(args[0])
    run_worker(spec, int(args[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
