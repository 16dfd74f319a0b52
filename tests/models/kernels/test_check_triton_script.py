"""The GPU session's script (benchmarks/gpu/check_triton.py) keeps working with the package on CPU.

A task is lent a GPU for 15 minutes now and then; a refactor that breaks the script's use of the
library would cost that whole session. Its Traffic-epoch section runs the real data pipeline and
trainer, so it runs here on a tiny config and a small frame, and its report renders the rows."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "gpu" / "check_triton.py"


def _script(monkeypatch):
    spec = importlib.util.spec_from_file_location("check_triton", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tiny = {"seq_len": 16, "pred_len": 4, "d_model": 16, "n_heads": 2, "e_layers": 1, "d_ff": 16, "batch": 16}
    monkeypatch.setattr(module, "TRAFFIC", {**module.TRAFFIC, **tiny})
    return module


def test_the_traffic_epoch_section_trains_each_variant_through_the_library(monkeypatch, tmp_path):
    script = _script(monkeypatch)
    frame = pd.DataFrame(np.random.default_rng(0).standard_normal((200, 5)), columns=[f"v{i}" for i in range(5)],
                         index=pd.date_range("2024-01-01", periods=200, freq="h"))
    rows = script.time_traffic_epochs(tmp_path, frame=frame, accelerator="cpu",
                                      variants=(("itransformer_mha", None), ("itransformer_damcha", "sdpa")))
    assert [row.get("error") for row in rows] == [None, None]
    assert [(row["model"], row["attn_backend"]) for row in rows] == [("itransformer_mha", None),
                                                                     ("itransformer_damcha", "sdpa")]
    # 200 rows split 70/10/20: 140 train rows, 140 - 16 - 4 + 1 windows.
    assert all(row["train_windows"] == 121 and row["epoch_seconds"] >= 0 for row in rows)
    report = {"status": "cpu plumbing", "environment": {}, "command": "test", "traffic_epoch": rows}
    assert "| itransformer_damcha | sdpa |" in script.markdown(report)
