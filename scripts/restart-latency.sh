#!/usr/bin/env bash
# The restart latency of the demo model at 2 ranks (issue #33): rank 1 is
# SIGKILLed at step 25 of 40 (checkpoints every 10), fsdp-run restarts the
# group, and fsdp-train resumes from step 20. Prints fsdp-run's restart line
# (the stop) and fsdp-train's latency line (failure to first step, by phase)
# for each of REPS runs (default 3). docs/trainer.md#restarts records them.
#
#   scripts/restart-latency.sh [REPS]     (after `make`; BUILD_DIR=build)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${BUILD_DIR:-build}/bin
reps=${1:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for rep in $(seq 1 "$reps"); do
  FSDP_TRAIN_TEST_SIGKILL_AT=1:25:0 "$bin/fsdp-run" --standalone --nproc-per-node 2 \
    --max-restarts 1 -- "$bin/fsdp-train" --steps 40 --save-every 10 --eval-every 0 \
    --sample-bytes 0 --resume auto --run-dir "$work/run-$rep" >"$work/out" 2>"$work/err"
  echo "run $rep:"
  grep -h "restart 1 of 1" "$work/err" | sed 's/^/  /'
  grep -h "restart 1: first step" "$work/out" | sed 's/^\[rank 0\]  */  /'
done
