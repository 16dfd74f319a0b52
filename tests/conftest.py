"""Session-wide test setup and the fixtures every test area uses (the benchmark data folder, a
PostgreSQL server for the shared-storage tests of ``tune`` and ``leaderboard``).

Without a GPU the Triton kernels run in triton's CPU interpreter. TRITON_INTERPRET must be set
before any kernel is first decorated, and another test module may trigger that before the kernel
tests run, so it is set here, once, at the start of the session.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Every test uses tiny tensors: one torch thread is faster than two and immune to a busy CPU.

    Module-scoped, so that it is in force before module-scoped fixtures train and predict: forecasts
    compared for equality must come from the same thread count (summation order).
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def data_root() -> Path:
    """The folder of the real benchmark CSVs; tests fail (never skip) when it is not configured."""
    root = os.environ.get("DAMCHA_TS_DATA")
    if not root or not Path(root).is_dir():
        pytest.fail("set DAMCHA_TS_DATA to the directory of the shared benchmark CSVs (../shared/data)")
    return Path(root)


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
    throwaway server started here from the installed binaries (without them: skipped, a failure under CI)."""
    import psycopg2  # noqa: F401  (the dev extra installs it: a missing driver is a failure)

    url = os.environ.get("DAMCHA_TS_TEST_POSTGRES_URL")
    if url:
        yield url
        return
    bindir = _postgres_bindir()
    if bindir is None:
        message = "no PostgreSQL server binaries here and no DAMCHA_TS_TEST_POSTGRES_URL; .ci/postgres.sh installs them"
        if os.environ.get("CI"):  # CI starts a server: without one, the multi-machine tests would not run
            pytest.fail(message)
        pytest.skip(message)
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
