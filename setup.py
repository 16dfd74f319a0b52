"""Packaging hook: wheels carry the repository's ``configs/`` as ``damcha_ts/configs``.

The configs are data that live at the top level of the repository (beside ``damcha_ts/``), so that
``damcha-ts fit --config itransformer_damcha/etth1`` works from a checkout; this copies them into
built wheels so that it works after ``pip install damcha-ts`` too. Everything else is in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithConfigs(build_py):
    def run(self) -> None:
        super().run()
        source = Path(__file__).resolve().parent / "configs"
        if source.is_dir() and not self.editable_mode:
            target = Path(self.build_lib) / "damcha_ts" / "configs"
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("*.pyc", "__pycache__"))


setup(cmdclass={"build_py": BuildPyWithConfigs})
