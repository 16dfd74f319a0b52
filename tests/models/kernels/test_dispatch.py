"""attn_backend="auto" on a GPU follows measured speeds (damcha_ts/models/kernels/dispatch.py): Triton
only where every timing of that GPU, dtype and token class found it faster than SDPA; nothing
measured means SDPA. The shipped table is checked against the GPU run it was taken from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from damcha_ts.errors import ConfigError
from damcha_ts.models import attention
from damcha_ts.models.attention import select_backend
from damcha_ts.models.kernels.dispatch import SPEEDS_FILE, dtype_name, parse_speeds, speed_table

ROOT = Path(__file__).resolve().parents[3]


def _table(*rows):
    return parse_speeds({"token_classes": {"small": 32, "medium": 256},
                         "measured": [dict(zip(("device", "dtype", "tokens", "triton_over_sdpa"), r)) for r in rows]},
                        "test table")


def test_triton_only_where_every_timing_of_its_class_says_faster():
    table = _table(("H200", "bfloat16", 866, 0.7), ("H200", "bfloat16", 11, 0.9), ("H200", "bfloat16", 25, 1.2))
    assert table.triton_is_faster("H200", "bfloat16", 500)  # large: 0.7
    assert not table.triton_is_faster("H200", "bfloat16", 20)  # small: 0.9 and 1.2 -> the worse decides
    assert not table.triton_is_faster("H200", "bfloat16", 100)  # medium: never measured
    assert not table.triton_is_faster("A100", "bfloat16", 866) and not table.triton_is_faster("H200", "float32", 866)
    assert [table.token_class(n) for n in (1, 32, 33, 256, 257)] == ["small", "small", "medium", "medium", "large"]


def test_the_shipped_table_is_the_measured_gpu_run():
    """Its rows are the core fwd+bwd ratios of benchmarks/results/triton_gpu.json, none made up."""
    run = json.loads((ROOT / "benchmarks" / "results" / "triton_gpu.json").read_text())
    measured = {(t["tokens"], t["d_model"]): t["core"]["ratios"]["triton/sdpa fwd_bwd"] for t in run["timing"]}
    rows = json.loads(SPEEDS_FILE.read_text())["measured"]
    assert {(r["tokens"], r["d_model"]): r["triton_over_sdpa"] for r in rows} == measured
    assert {r["device"] for r in rows} == {run["environment"]["gpu"]}
    # That run found Triton slower everywhere, so auto runs SDPA at every shape on that GPU.
    assert not any(speed_table().triton_is_faster(run["environment"]["gpu"], "bfloat16", n) for n in (11, 100, 866))


def test_a_bad_table_names_itself():
    with pytest.raises(ConfigError, match="test table: not a backend speed table"):
        parse_speeds({"measured": []}, "test table")
    with pytest.raises(ConfigError, match="every ratio be > 0"):
        _table(("H200", "bfloat16", 11, 0.0))


class ReportsCuda(torch.Tensor):
    @property
    def is_cuda(self):
        return True


@pytest.mark.parametrize("measured_faster, chosen", [(False, "sdpa"), (True, "triton")])
def test_auto_on_a_gpu_runs_what_was_measured_faster(monkeypatch, measured_faster, chosen):
    """A kernel that can run the call is still not chosen where it was timed slower."""
    import types

    x, value, metrics = torch.randn(2, 2, 5, 4), torch.randn(2, 2, 5, 4), torch.randn(2, 2, 4, 4)
    can_run_it = types.SimpleNamespace(triton_unsupported_reason=lambda *args: None, TRITON_MISSING="missing")
    monkeypatch.setattr(attention, "_triton_module", lambda: (can_run_it, None))
    monkeypatch.setattr(attention, "_measured_faster", lambda x_heads: measured_faster)
    assert select_backend("auto", x.as_subclass(ReportsCuda), metrics, value) == chosen
    assert select_backend("triton", x.as_subclass(ReportsCuda), metrics, value) == "triton"  # asked for: honoured
    assert dtype_name(torch.bfloat16) == "bfloat16" and dtype_name(torch.float32) == "float32"
