"""What must not move when the wiring layer is redesigned (issue 19): the fingerprint of each piece.

``python tests/fingerprint/fingerprints.py`` records them into ``recorded.json``; it was run on the
code before the redesign (commit named in the file) and the file is never rewritten to make a test
pass. ``test_fingerprint.py`` computes them again on the current code and compares.

- config hashes: every shipped run config at every protocol horizon, every cell of every
  leaderboard grid, and the resolved dicts themselves (a hash of their JSON);
- model init: a digest of the initial weights of every family x attention (point and quantile);
- training: a forecast of a fixed batch after 3 real Lightning training steps on ETTh1 (values).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECORDED = Path(__file__).with_name("recorded.json")
HORIZONS = (96, 192, 336, 720)
MODELS = ("itransformer_mha", "itransformer_damcha", "gateformer_mha", "gateformer_damcha")
TINY = {"d_model": 16, "n_heads": 2, "e_layers": 1, "d_ff": 32}
QUANTILES = [0.1, 0.9]


def config_fingerprints() -> dict[str, str]:
    """``"<config>@H<horizon>" -> config_hash`` for the shipped configs and every grid cell."""
    from damcha_ts.leaderboard.grid import load_grid
    from damcha_ts.leaderboard.cells import resolve_cell
    from damcha_ts.training import available_configs, config_hash, load_run_config

    hashes = {}
    for name in available_configs():
        for horizon in HORIZONS:
            hashes[f"{name}@H{horizon}"] = config_hash(load_run_config(name, horizon=horizon))
    for grid_file in sorted((ROOT / "configs" / "leaderboard").glob("*.yaml")):
        grid = load_grid(grid_file)
        for cell in grid.cells():
            resolved = resolve_cell(cell, grid, Path("runs"))
            key = f"{grid_file.name}:{cell.dataset}/{cell.model}/H{cell.horizon}/seed{cell.seed}"
            hashes[key] = resolved.config_hash
    return hashes


def _digest(tensors) -> str:
    sha = hashlib.sha256()
    for name, tensor in tensors:
        sha.update(name.encode())
        sha.update(tensor.detach().contiguous().cpu().numpy().tobytes())
    return sha.hexdigest()[:16]


def init_fingerprints() -> dict[str, str]:
    """Digest of the freshly initialised weights (seeded), per model, point and quantile."""
    import torch

    from damcha_ts.training.module import ForecastModule

    digests = {}
    for name in MODELS:
        for quantiles in (None, QUANTILES):
            torch.manual_seed(0)
            module = ForecastModule({"name": name, "seq_len": 48, "pred_len": 24, **TINY},
                                    {"quantiles": quantiles})
            key = name if quantiles is None else f"{name}+quantiles"
            digests[key] = _digest(sorted(module.state_dict().items()))
    return digests


def trained_fingerprints(data_root: Path | None = None) -> dict[str, list[float]]:
    """Forecast values of a fixed ETTh1 batch after 3 training steps through the real trainer."""
    import tempfile

    import torch

    from damcha_ts.data import prepare
    from damcha_ts.training import TrainingConfig, fit_series

    series = prepare("ETTh1", seq_len=48, pred_len=24, **({"path": data_root} if data_root else {}))
    batch = series.windows("test")[0]
    x = torch.as_tensor(batch["x"])[None]
    x_mark = torch.as_tensor(batch["x_mark"])[None]
    outputs = {}
    for name in MODELS:
        for quantiles in (None, QUANTILES):
            training = TrainingConfig(max_epochs=1, batch_size=8, seed=7, quantiles=quantiles)
            with tempfile.TemporaryDirectory() as out:
                fit = fit_series(series, {"name": name, "seq_len": 48, "pred_len": 24, **TINY}, training, out,
                                 progress=False, trainer_kwargs={"limit_train_batches": 3, "limit_val_batches": 2,
                                                                 "logger": False, "enable_checkpointing": True})
            with torch.no_grad():
                forecast = fit.module.model.eval()(x, x_mark)
            key = name if quantiles is None else f"{name}+quantiles"
            outputs[key] = [round(float(v), 7) for v in forecast.flatten()[:: max(1, forecast.numel() // 24)]]
    return outputs


def record() -> None:
    import os

    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    data_root = os.environ.get("DAMCHA_TS_DATA")
    recorded = {
        "commit": commit,
        "config_hash": config_fingerprints(),
        "model_init": init_fingerprints(),
        "after_3_steps": trained_fingerprints(Path(data_root) if data_root else None),
    }
    RECORDED.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {RECORDED} ({len(recorded['config_hash'])} config hashes)", file=sys.stderr)


if __name__ == "__main__":
    record()
