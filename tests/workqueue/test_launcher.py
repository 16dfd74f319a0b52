"""K worker processes on one machine (damcha_ts.workqueue.launcher): a storage URL with a password
reaches the workers in their environment and never a file; exit codes come back in order; each
worker has its share of the cores and its own session (a terminal's Ctrl+C reaches the launcher)."""

from __future__ import annotations

import json

from damcha_ts.training.devices import threads_per_worker
from damcha_ts.workqueue.launcher import launch_workers

SECRET = "s3cr3t-pw"


def test_workers_get_the_storage_url_but_no_file_holds_it(tmp_path):
    url = f"postgresql+psycopg2://lb:{SECRET}@db.example.org/leaderboard"
    spec = {"storage": url, "out": str(tmp_path), "grid": "configs/leaderboard/smoke.yaml"}
    lines = []
    codes = launch_workers("tests.workqueue.echo_worker", spec, tmp_path / "workers", 2, tag="t", log=lines.append)

    assert codes == [0, 1]
    for index in range(2):
        seen = json.loads((tmp_path / f"{index}.json").read_text())
        assert seen["spec"] == spec  # the worker has everything, the URL included
        assert SECRET not in seen["file"] and json.loads(seen["file"])["grid"] == spec["grid"]
        assert seen["threads"] == str(threads_per_worker(2)) and seen["session_leader"]
    assert not list((tmp_path / "workers").glob("spec_*.json"))  # removed at the end
    assert "worker 1 exited with code 1" in lines[-1]
    for path in (tmp_path / "workers").iterdir():  # what the launcher wrote: the workers' logs
        assert SECRET not in path.read_text(errors="replace")
