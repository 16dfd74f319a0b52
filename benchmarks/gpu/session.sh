#!/usr/bin/env bash
# Every GPU check of the project in one call (a device session is lent about 15 minutes of one H200
# in all, machine start included), in priority order:
#   1. benchmarks/gpu/check_triton.py (issue 7): timing, the training step and the profile first,
#      while it has the GPU alone, then correctness (compiles mostly);
#   2. as soon as check_triton.py reaches its correctness section, the leaderboard runners start
#      beside it (benchmarks/gpu/leaderboard.sh: the Weather cells, issue 5) until the budget ends;
#   3. after check_triton.py, the GPU-only kernel tests (pytest -m gpu) beside the runners.
#
#   bash benchmarks/gpu/session.sh OUT_DIR [BUDGET_SECONDS]     # default budget 480 s (8 minutes)
#
# OUT_DIR receives check_triton.log, leaderboard.log, pytest_gpu.log, triton_gpu.json/md and
# results.tar.gz (benchmarks/results as the GPU left it: new leaderboard rows, curves, samples).
# Nothing is lost at the budget: each piece writes as it goes and the leaderboard resumes.
set -uo pipefail
out="${1:?usage: session.sh OUT_DIR [BUDGET_SECONDS]}"
budget="${2:-480}"
if ! [[ "$budget" =~ ^[0-9]+$ ]] || [ "$budget" -lt 120 ]; then
  echo "session.sh: BUDGET_SECONDS must be a whole number of at least 120, got '$budget'" >&2
  exit 2
fi
mkdir -p "$out"
out="$(cd "$out" && pwd)"
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
started=$(date +%s)
left() { echo $(( started + budget - $(date +%s) )); }
say() { echo "[session.sh +$(( $(date +%s) - started ))s] $*"; }

# The leaderboard queues its cells in an Optuna storage; the GPU machine has no optuna, so it comes
# from wheels carried with the checkout (see benchmarks/gpu/README.md for how to fetch them).
if ! python -c "import optuna" 2>/dev/null; then
  if ls benchmarks/gpu/wheels/optuna-*.whl >/dev/null 2>&1; then
    pip install -q --no-index --find-links benchmarks/gpu/wheels optuna || say "optuna did not install from benchmarks/gpu/wheels"
  else
    say "no optuna and no benchmarks/gpu/wheels: the leaderboard part will fail (check_triton.py needs neither)"
  fi
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.version.cuda)"

say "check_triton.py"
timeout --signal=TERM $(( budget - 30 )) python benchmarks/gpu/check_triton.py --out-dir "$out" --write-dispatch \
  > "$out/check_triton.log" 2>&1 &
check=$!
while kill -0 "$check" 2>/dev/null && ! grep -q -- "--- correctness" "$out/check_triton.log"; do
  sleep 2
done
board=
if [ "$(left)" -gt 85 ]; then  # a Weather epoch alone takes about a minute
  say "leaderboard runners start ($(left) s left)"
  LEADERBOARD_SECONDS=$(( $(left) - 25 )) LEADERBOARD_REPORT=0 bash benchmarks/gpu/leaderboard.sh \
    > "$out/leaderboard.log" 2>&1 &
  board=$!
else
  say "no time left for leaderboard runners ($(left) s)"
fi
wait "$check"; say "check_triton.py exit status $? ($(left) s left)"
tail -n 3 "$out/check_triton.log"
if [ "$(left)" -gt 60 ]; then
  timeout --signal=TERM $(( $(left) - 30 )) python -m pytest tests/models/kernels -m gpu -q -p no:cacheprovider \
    > "$out/pytest_gpu.log" 2>&1
  say "pytest -m gpu exit status $?"; tail -n 5 "$out/pytest_gpu.log"
fi
if [ -n "$board" ]; then
  wait "$board"; say "leaderboard.sh exit status $?"
  grep -E "^(ran|report)|epoch .*best|Error|error" "$out/leaderboard.log" | tail -n 30
fi
tar -czf "$out/results.tar.gz" benchmarks/results
say "done"
