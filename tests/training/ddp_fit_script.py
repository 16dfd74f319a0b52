"""Run by test_ddp.py in a subprocess: Lightning's DDP launcher re-executes this file for rank 1."""

import json
import os
import sys

import torch

from damcha_ts.forecasting.experiment import run_experiment
from damcha_ts.training import load_run_config

if __name__ == "__main__":
    torch.set_num_threads(1)
    out = sys.argv[1]
    config = load_run_config(
        "itransformer_damcha/etth1",
        horizon=24,
        overrides=[
            "model.d_model=16", "model.d_ff=16", "model.n_heads=2", "model.generator_hidden=[8]",
            "training.max_epochs=2", "training.accelerator=cpu", "training.devices=2", "training.strategy=ddp",
        ],
    )
    result = run_experiment(
        config, out, progress=False,
        trainer_kwargs={"limit_train_batches": 4, "enable_model_summary": False, "log_every_n_steps": 1},
    )
    rank = int(os.environ.get("LOCAL_RANK", "0"))
    with open(os.path.join(out, f"rank{rank}.json"), "w") as handle:
        json.dump(result, handle)
