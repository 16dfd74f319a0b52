"""``import damcha_ts`` (and the modules every user touches) must not import gluonts."""

from __future__ import annotations

import subprocess
import sys


def test_core_imports_do_not_load_gluonts():
    code = (
        "import sys, damcha_ts, damcha_ts.models.quantiles, damcha_ts.api, damcha_ts.models; "
        "loaded = sorted(m for m in sys.modules if m == 'gluonts' or m.startswith('gluonts.')); "
        "print(loaded); sys.exit(1 if loaded else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"gluonts imported by the core: {result.stdout}{result.stderr}"
