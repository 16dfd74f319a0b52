"""Many runs on many workers, on one engine: Optuna's storages.

- ``storage.py``: where the work lives (a SQLite file, a PostgreSQL/MySQL URL, a journal file), with
  heartbeats and retries, and URLs shown without their passwords;
- ``queue.py``: a study's WAITING trials as a work queue (:class:`StudyQueue`: claim one atomically,
  run it under a heartbeat, tell how it ended, requeue the work of a dead or stopped worker);
- ``launcher.py``: K worker processes on this machine, each with its share of the cores or one GPU.

The leaderboard (a grid cell per trial) and ``damcha-ts tune`` (a trial of the launch's budget) are
built on these; other machines join by running the same command against the same storage URL.
Importing this package loads neither torch nor optuna.
"""
