"""Installing without the GPU stack: triton (about 1 GB) is an extra, and DAMCHA works without it.

- pyproject.toml: triton is not a requirement; the ``gpu`` extra has it, and so has ``dev`` (the tests
  run the kernels in triton's CPU interpreter);
- install.sh adds the ``gpu`` extra exactly where ``nvidia-smi -L`` sees a GPU;
- with ``import triton`` failing (as on a machine without it), ``attn_backend="triton"`` is a one-line
  error naming the extra, and ``"auto"`` trains on SDPA, saying why where it would have used triton.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from matrix import TINY, hourly_frame, write_csv

ROOT = Path(__file__).resolve().parents[2]
TRITON_ABSENT = "import sys\nsys.modules['triton'] = None  # `import triton` raises ImportError, as without it\n"
INSTALL_HINT = "pip install 'damcha-ts[gpu]'"


def _requirement_names(requirements: list[str]) -> set[str]:
    return {requirement.split(";")[0].split(">")[0].split("=")[0].split("[")[0].strip() for requirement in requirements}


def test_triton_is_an_extra_not_a_requirement():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "triton" not in _requirement_names(project["dependencies"])
    extras = project["optional-dependencies"]
    assert "triton" in _requirement_names(extras["gpu"]) and "triton" in _requirement_names(extras["dev"])


def _fake_tool(folder: Path, name: str, script: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)


@pytest.mark.parametrize(("gpu", "asked", "installed"), [
    (False, [], ".[plot]"), (True, [], ".[plot,gpu]"), (False, ["dev"], ".[dev]"), (True, ["dev"], ".[dev,gpu]"),
])
def test_install_sh_adds_the_gpu_extra_where_nvidia_smi_sees_a_gpu(tmp_path, gpu, asked, installed):
    """The real install.sh, with a stand-in python (torch "already installed"; pip only records its
    arguments) and nvidia-smi (listing a GPU, or failing as on a machine without one)."""
    calls = tmp_path / "calls.txt"
    _fake_tool(tmp_path, "python", f'[ "$1" = "-m" ] && echo "$@" >> {calls}\nexit 0\n')
    _fake_tool(tmp_path, "nvidia-smi", "echo 'GPU 0: NVIDIA H200 (UUID: GPU-0)'\n" if gpu else "exit 9\n")
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "PYTHON": str(tmp_path / "python")}
    result = subprocess.run(["bash", str(ROOT / "install.sh"), *asked], env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert calls.read_text().splitlines() == [f"-m pip install -e {installed}"]


def _python(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter where ``import triton`` fails."""
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-c", TRITON_ABSENT + textwrap.dedent(code)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)


def _fit(data: Path, out: Path, backend: str) -> list[str]:
    return ["fit", "--data", str(data), "--model", "itransformer_damcha", "--horizon", "4", "--lookback", "16", *TINY,
            "--set", "model.generator_hidden=[8]", "--set", f"model.attn_backend={backend}",
            "--set", "training.max_epochs=1", "--set", "training.batch_size=16", "--no-plot", "--out", str(out)]


def test_without_triton_the_triton_backend_is_refused_naming_the_extra(tmp_path):
    data = write_csv(hourly_frame(), tmp_path / "series.csv")
    result = _python(f"from damcha_ts.cli.main import main\nsys.exit(main({_fit(data, tmp_path / 'run', 'triton')!r}))",
                     tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert ("damcha-ts: error: attn_backend='triton' needs the triton package, which is not installed: "
            f"{INSTALL_HINT}") in result.stderr


def test_without_triton_auto_trains_on_sdpa(tmp_path):
    data = write_csv(hourly_frame(), tmp_path / "series.csv")
    result = _python(f"from damcha_ts.cli.main import main\nsys.exit(main({_fit(data, tmp_path / 'run', 'auto')!r}))",
                     tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "run" / "metrics.json").is_file()


def test_without_triton_auto_says_once_why_it_runs_sdpa_where_it_would_run_triton(tmp_path):
    """Where "auto" would pick triton (CUDA input; a tensor that reports CUDA stands in for a GPU on
    this machine), it picks sdpa, warns once per process, and computes what the math backend does."""
    result = _python("""
        import warnings
        import torch
        import damcha_ts.models.attention as attention
        from damcha_ts.models.attention import damcha_attention, select_backend

        attention._measured_faster = lambda x_heads: True  # a GPU where triton was timed faster than sdpa

        class ReportsCuda(torch.Tensor):
            @property
            def is_cuda(self):
                return True

        torch.manual_seed(0)
        x, value = torch.randn(2, 2, 5, 4), torch.randn(2, 2, 5, 4)
        metrics = torch.randn(2, 2, 4, 4)
        with warnings.catch_warnings(record=True) as shown:
            warnings.simplefilter("always")
            chosen = [select_backend("auto", x.as_subclass(ReportsCuda), metrics, value) for _ in range(3)]
        assert chosen == ["sdpa"] * 3, chosen
        assert len(shown) == 1, [str(w.message) for w in shown]
        print(shown[0].message)
        auto, _ = damcha_attention(x, metrics, value, backend="auto")
        math, _ = damcha_attention(x, metrics, value, backend="math")
        torch.testing.assert_close(auto, math)
        assert sys.modules["triton"] is None  # nothing imported it behind our back
        """, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == ("attn_backend='auto' runs DAMCHA attention on sdpa: the fused Triton kernel "
                                     f"needs the triton package, which is not installed ({INSTALL_HINT})")
