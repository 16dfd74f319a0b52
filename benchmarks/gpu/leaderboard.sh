#!/usr/bin/env bash
# Leaderboard rows on one GPU within a 10-minute budget (issue 5): Weather for iTransformer-MHA and
# iTransformer-DAMCHA at H = 96/192/336/720, then Traffic and Electricity when their files are
# present (otherwise the runner says which file is missing and how to provide it, and skips them),
# then the static-metric ablation rows on Weather (configs/leaderboard/ablations_weather.yaml).
#
#   bash benchmarks/gpu/leaderboard.sh            # from anywhere; results go to benchmarks/results/
#   LEADERBOARD_SECONDS=1800 bash benchmarks/gpu/leaderboard.sh   # a longer budget
#   LEADERBOARD_RUNNERS=1 bash benchmarks/gpu/leaderboard.sh      # one cell at a time
#   LEADERBOARD_REPORT=0 bash benchmarks/gpu/leaderboard.sh       # skip rebuilding the report
#
# Training runs in bf16-mixed on the GPU (the configs' precision "auto"). A Weather iTransformer
# (25 tokens, batch 32) leaves most of an H200 idle, so LEADERBOARD_RUNNERS runners (default 3)
# share the GPU; each cell's run folder is locked while it trains, so every runner takes a different
# cell. The rows' seconds per epoch then describe a shared GPU. The run is resumable: when the
# budget ends mid-cell, the finished cells are already in benchmarks/results/leaderboard.csv, the
# interrupted cell resumes from its last checkpoint on the next call (on the same machine), and the
# report is rebuilt from what finished.
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
stagger=5  # seconds between runner starts: the next one finds the first one's cell locked
if ! [[ "$runners" =~ ^[1-9][0-9]*$ ]]; then
  echo "leaderboard.sh: LEADERBOARD_RUNNERS must be a whole number >= 1, got '$runners'" >&2
  exit 2
fi
if ! [[ "$budget" =~ ^[0-9]+$ ]] || [ "$budget" -le $(( stagger * (runners - 1) )) ]; then
  echo "leaderboard.sh: LEADERBOARD_SECONDS must be a whole number above $(( stagger * (runners - 1) )), got '$budget'" >&2
  exit 2
fi
# Each runner's worker takes an equal share of the cores (torch would give every one all of them,
# and three processes spinning 16 OpenMP threads each on 16 cores slow each other down).
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(( $(nproc) / runners > 0 ? $(nproc) / runners : 1 ))}"
grids=(--config configs/leaderboard/weather.yaml
       --config configs/leaderboard/traffic.yaml
       --config configs/leaderboard/electricity.yaml
       --config configs/leaderboard/ablations_weather.yaml)

nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || echo "leaderboard.sh: no nvidia-smi; the runner will use the CPU" >&2
started=$(date +%s)
pids=()
for ((i = 0; i < runners; i++)); do
  # Each runner's limit is what is left of the budget, so that all of them end within it.
  timeout --signal=TERM $(( budget - stagger * i )) \
    python -m damcha_ts.cli.main leaderboard "${grids[@]}" --no-download "$@" &
  pids+=($!)
  [ $(( i + 1 )) -lt "$runners" ] && sleep "$stagger"
done
status=0
timed_out=0
for pid in "${pids[@]}"; do
  wait "$pid"
  code=$?
  if [ "$code" -eq 124 ]; then
    timed_out=1
  elif [ "$code" -ne 0 ]; then
    status=$code
  fi
done
echo "leaderboard.sh: $runners runner(s) done after $(( $(date +%s) - started )) s" >&2
if [ "$timed_out" -eq 1 ]; then
  echo "leaderboard.sh: the ${budget} s budget ended mid-cell; rerun this script to continue" >&2
  [ "$status" -eq 0 ] && status=124
fi
if [ "${LEADERBOARD_REPORT:-1}" != 0 ]; then
  # Rebuild LEADERBOARD.md and the plots from every finished row (also after a timeout).
  python -m damcha_ts.cli.main leaderboard "${grids[@]}" --report-only
fi
exit "$status"
