"""A built wheel is usable on its own: it carries the shipped configs and finds them without a checkout."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(ROOT)],
        check=True, capture_output=True, text=True,
    )
    (built,) = out.glob("damcha_ts-*.whl")
    return built


def test_wheel_carries_every_shipped_config(wheel):
    shipped = {p.relative_to(ROOT).as_posix() for p in (ROOT / "configs").rglob("*.yaml")}
    with zipfile.ZipFile(wheel) as archive:
        packaged = {name.removeprefix("damcha_ts/") for name in archive.namelist() if name.startswith("damcha_ts/configs/")}
    assert shipped and shipped == packaged


def test_installed_wheel_resolves_configs_by_name_outside_the_checkout(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True, capture_output=True, text=True,
    )
    probe = (
        "import json, damcha_ts\n"
        "from damcha_ts.training import load_run_config\n"
        "from damcha_ts.tuning.search_file import load_search_spec\n"
        "config = load_run_config('itransformer_damcha/etth1', horizon=336)\n"
        "load_search_spec('itransformer_damcha_etth1')\n"
        "print(json.dumps({'package': damcha_ts.__file__, 'd_model': config['model']['d_model']}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
        check=True, capture_output=True, text=True,
    )
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert Path(found["package"]).is_relative_to(target)  # not the checkout
    assert found["d_model"] == 512  # the H=336 section of configs/itransformer_mha/etth1.yaml


def test_wheel_requires_triton_only_through_the_gpu_and_dev_extras(wheel):
    """CPU-only machines do not download triton (about 1 GB): the built metadata names it only under
    ``extra == "gpu"`` and ``extra == "dev"``."""
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [name for name in archive.namelist() if name.endswith(".dist-info/METADATA")]
        requires = [line.removeprefix("Requires-Dist: ") for line in archive.read(metadata).decode().splitlines()
                    if line.startswith("Requires-Dist: triton")]
    assert requires and all("extra ==" in line for line in requires)
    assert {line.split('extra == "')[1].rstrip('"') for line in requires} == {"gpu", "dev"}
