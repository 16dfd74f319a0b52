"""Fixtures for the Optuna study tests: a tiny real model on real ETTh1, search files, PostgreSQL.

Each trial trains a ~4k-parameter DAMCHA-iTransformer on a few ETTh1 batches for a few epochs
(about a second), through the real Lightning trainer and the real data pipeline.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

# Few batches per epoch keep each trial about a second; the val limit keeps val_loss comparable.
TRAINER_LIMITS = {"limit_train_batches": 8, "limit_val_batches": 2, "log_every_n_steps": 1}

TINY_RUN_CONFIG = {
    "data": {"dataset": "ETTh1", "seq_len": 48, "pred_len": 24},
    "model": {
        "name": "itransformer_damcha",
        "d_model": 16,
        "d_ff": 16,
        "e_layers": 1,
        "n_heads": 2,
        "dropout": 0.0,
        "generator_hidden": [8],
    },
    "training": {"max_epochs": 3, "patience": 3, "learning_rate": 1.0e-3, "seed": 11, "deterministic": True},
}


def search_data(**sections) -> dict:
    """A search file over learning rate and the generator width, with the tiny trainer limits."""
    data = {
        "sampler": {"seed": 0, "n_startup_trials": 2},
        "pruner": {"type": "median", "n_startup_trials": 1, "n_warmup_steps": 0},
        "trainer": dict(TRAINER_LIMITS),
        "space": {
            "training.learning_rate": {"type": "float", "low": 1.0e-4, "high": 1.0e-2, "log": True},
            "model.generator_hidden": {"type": "categorical", "choices": [[8], [4, 8]]},
        },
    }
    data.update(sections)
    return data



@pytest.fixture
def study_files(tmp_path):
    """Write a run config and a search file; returns a function (search sections...) -> paths."""

    def write(**sections) -> tuple[Path, Path]:
        config_path = tmp_path / "run.yaml"
        config_path.write_text(yaml.safe_dump(TINY_RUN_CONFIG), encoding="utf-8")
        search_path = tmp_path / "search.yaml"
        search_path.write_text(yaml.safe_dump(search_data(**sections)), encoding="utf-8")
        return config_path, search_path

    return write


# --- PostgreSQL -------------------------------------------------------------------------------


def _postgres_bindir() -> Path | None:
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    for candidate in candidates:
        if (candidate / "initdb").is_file() and (candidate / "pg_ctl").is_file():
            return candidate
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def postgres_url():
    """A PostgreSQL database URL: DAMCHA_TS_TEST_POSTGRES_URL (set by .ci/postgres.sh), or a
    throwaway server started here from the installed binaries (skipped only without them)."""
    url = os.environ.get("DAMCHA_TS_TEST_POSTGRES_URL")
    if url:
        import psycopg2  # noqa: F401  (CI gave a server, so a missing driver is a failure)

        yield url
        return
    bindir = _postgres_bindir()
    if bindir is None:
        pytest.skip(
            "no PostgreSQL server binaries here and no DAMCHA_TS_TEST_POSTGRES_URL; .ci/postgres.sh installs them"
        )
    pytest.importorskip("psycopg2", reason="psycopg2-binary (the dev extra) is needed to talk to PostgreSQL")
    folder = Path(tempfile.mkdtemp(prefix="damcha_ts_pg_test_"))
    run_as: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        user = "postgres" if _user_exists("postgres") else "nobody"
        shutil.chown(folder, user=user)
        run_as = ["runuser", "-u", user, "--"]
    port = _free_port()
    data_dir = folder / "data"
    subprocess.run(
        [*run_as, str(bindir / "initdb"), "-D", str(data_dir), "-U", "damcha", "--auth=trust", "-E", "UTF8"],
        check=True,
        capture_output=True,
    )
    options = f"-c listen_addresses=127.0.0.1 -p {port} -k {folder}"
    subprocess.run(
        [
            *run_as,
            str(bindir / "pg_ctl"),
            "-D",
            str(data_dir),
            "-l",
            str(folder / "server.log"),
            "-w",
            "-t",
            "60",
            "-o",
            options,
            "start",
        ],
        check=True,
        capture_output=True,
    )
    try:
        subprocess.run(
            [
                *run_as,
                str(bindir / "createdb"),
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
                "-U",
                "damcha",
                "damcha_test",
            ],
            check=True,
            capture_output=True,
        )
        yield f"postgresql+psycopg2://damcha@127.0.0.1:{port}/damcha_test"
    finally:
        subprocess.run(
            [*run_as, str(bindir / "pg_ctl"), "-D", str(data_dir), "-m", "fast", "-w", "stop"],
            capture_output=True,
        )
        shutil.rmtree(folder, ignore_errors=True)


def _user_exists(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True
