#!/bin/bash
# Session 5 lane (1 thread): leaderboard cells of grid selections from the frozen snapshot
# /work/lane6; results land in /work/main.  Usage: session5_lane.sh LOG "ARGS1" "ARGS2" ...
# (each quoted argument is one leaderboard selection, run in order).
export DAMCHA_TS_DATA=/work/shared/data OMP_NUM_THREADS=1 PYTHONPATH=/work/lane6
cd /work/lane6
log=$1; shift
for selection in "$@"; do
    # shellcheck disable=SC2086
    damcha-ts leaderboard --results /work/main/benchmarks/results/leaderboard.csv \
        --runs-dir /work/main/runs/leaderboard $selection >> "$log" 2>&1
    echo "rc=$? $selection" >> "$log"; date >> "$log"
done
