"""What a result row records about where it ran."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from damcha_ts.leaderboard.environment import library_versions, source_commit

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="an installed copy, not a git checkout")
def test_versions_name_the_commit_the_code_runs_from():
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, check=True).stdout.strip()
    commit = source_commit()
    assert commit == head[:12] + ("-dirty" if dirty else "")
    assert library_versions().endswith(f" commit={commit}")
    assert library_versions().startswith("python=") and " torch=" in library_versions()
