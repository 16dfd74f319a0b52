#!/usr/bin/env bash
# Leaderboard rows on one GPU within a 10-minute budget (issue 5): Weather for iTransformer-MHA and
# iTransformer-DAMCHA at H = 96/192/336/720, then Traffic and Electricity when their files are
# present (otherwise the runner says which file is missing and how to provide it, and skips them),
# then the static-metric ablation rows on Weather (configs/leaderboard/ablations_weather.yaml).
#
#   bash benchmarks/gpu/leaderboard.sh            # from anywhere; results go to benchmarks/results/
#   LEADERBOARD_SECONDS=1800 bash benchmarks/gpu/leaderboard.sh   # a longer budget
#   LEADERBOARD_RUNNERS=1 bash benchmarks/gpu/leaderboard.sh      # one cell at a time (workers on the GPU)
#   LEADERBOARD_REPORT=0 bash benchmarks/gpu/leaderboard.sh       # skip rebuilding the report
#
# Training runs in bf16-mixed on the GPU (the configs' precision "auto"). A Weather iTransformer
# (25 tokens, batch 32) leaves most of an H200 idle, so LEADERBOARD_RUNNERS workers (default 3)
# share the GPU (`--workers`); the grid's study hands each worker a different cell. The rows' seconds
# per epoch then describe a shared GPU. The run is resumable: when the budget ends mid-cell (SIGTERM),
# the finished cells are already exported to benchmarks/results/leaderboard.csv, the interrupted
# cells go back to the queue and resume from their last checkpoint on the next call (on the same
# machine), and the report is rebuilt from what finished.
# Commit benchmarks/results/ afterwards.
set -uo pipefail
cd "$(dirname "$0")/../.."
if [ -z "${DAMCHA_TS_DATA:-}" ] && [ -d ../shared/data ]; then
  export DAMCHA_TS_DATA="$(cd ../shared/data && pwd)"
fi
export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}"  # one GPU
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"       # run from the checkout without installing
budget="${LEADERBOARD_SECONDS:-570}"                       # leaves ~30 s of the 10 minutes for the report
runners="${LEADERBOARD_RUNNERS:-3}"
if ! [[ "$runners" =~ ^[1-9][0-9]*$ ]]; then
  echo "leaderboard.sh: LEADERBOARD_RUNNERS must be a whole number >= 1, got '$runners'" >&2
  exit 2
fi
if ! [[ "$budget" =~ ^[1-9][0-9]*$ ]]; then
  echo "leaderboard.sh: LEADERBOARD_SECONDS must be a whole number of seconds, got '$budget'" >&2
  exit 2
fi
grids=(--config configs/leaderboard/weather.yaml
       --config configs/leaderboard/traffic.yaml
       --config configs/leaderboard/electricity.yaml
       --config configs/leaderboard/ablations_weather.yaml)

nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || echo "leaderboard.sh: no nvidia-smi; the runner will use the CPU" >&2
started=$(date +%s)
# The workers share the one visible GPU and split the cores (damcha_ts.workqueue.launcher).
timeout --signal=TERM "$budget" \
  python -m damcha_ts.cli.main leaderboard "${grids[@]}" --no-download --workers "$runners" "$@"
status=$?
echo "leaderboard.sh: done after $(( $(date +%s) - started )) s" >&2
if [ "$status" -eq 124 ]; then
  echo "leaderboard.sh: the ${budget} s budget ended mid-cell; rerun this script to continue" >&2
fi
if [ "${LEADERBOARD_REPORT:-1}" != 0 ]; then
  # Rebuild LEADERBOARD.md and the plots from every finished row (also after a timeout).
  python -m damcha_ts.cli.main leaderboard "${grids[@]}" --report-only
fi
exit "$status"
