"""A worker for tests/workqueue/test_launcher.py: writes what it was given and where it runs."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from damcha_ts.workqueue.launcher import read_spec

if __name__ == "__main__":
    spec_path, index = sys.argv[1], int(sys.argv[2])
    spec = read_spec(spec_path)
    seen = {"spec": spec, "file": Path(spec_path).read_text(encoding="utf-8"), "threads": os.environ["OMP_NUM_THREADS"],
            "session_leader": os.getsid(0) == os.getpid()}
    Path(spec["out"], f"{index}.json").write_text(json.dumps(seen), encoding="utf-8")
    sys.exit(index)  # exit codes come back in order
