#!/usr/bin/env bash
# What checkpoints cost training (issue #33): a 57 M-parameter GPT (8 blocks
# of width 768) at 2 ranks, trained with no step checkpoints, with
# synchronous ones every 5 steps and with --async-save ones every 5 steps,
# the three interleaved in each of REPS rounds (default 2). Prints, per
# mode, the wall time per step and its ratio to the run without saves of the
# same round, twice:
# - "steady": from step 1 to step 16, three saves in 15 steps (each save's
#   cost falls in the step after it), the step time of a long run;
# - "whole run": from step 1 to the last, which adds the last step's
#   validation and, before it, the save of step 20 (a background one must
#   end before the final checkpoint).
# docs/trainer.md#asynchronous-saves records the results.
#
#   scripts/async-save-bench.sh [REPS] [STEPS]   (after `make`; BUILD_DIR=build)
#
# FSDP_BENCH_TRAIN_ARGS adds fsdp-train options (default: --batch 4
# --context 128, about a second a step on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${BUILD_DIR:-build}/bin
reps=${1:-2}
steps=${2:-21}
extra=${FSDP_BENCH_TRAIN_ARGS:---batch 4 --context 128}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
((steps >= 17)) || { echo "async-save-bench: STEPS must be at least 17 (steps 1-16 are the steady part), got $steps" >&2; exit 1; }
for tool in fsdp-run fsdp-train; do
  [[ -x $bin/$tool ]] || { echo "async-save-bench: $bin/$tool is missing; run make first" >&2; exit 1; }
done

# Seconds per step from step 1 to step LAST (default: the last), from
# metrics.jsonl's elapsed_s.
seconds_per_step() {
  grep '"step"' "$1/metrics.jsonl" |
    sed -E 's/.*"step":([0-9]+).*"elapsed_s":([0-9.eE+-]+).*/\1 \2/' |
    awk -v last="${2:-0}" 'NR == 1 { s0 = $1; e0 = $2 }
      last == 0 || $1 <= last { s = $1; e = $2 } END { print (e - e0) / (s - s0) }'
}

echo "57 M GPT (--layers 8 --width 768 --heads 12 $extra), 2 ranks, $steps steps," \
  "checkpoints every 5; $(nproc) cores"
printf '%-6s %-6s %12s %8s %12s %8s\n' round mode "steady s" ratio "whole run s" ratio
for rep in $(seq 1 "$reps"); do
  none="" none_steady=""
  for mode in none sync async; do
    args=(--layers 8 --width 768 --heads 12 $extra --steps "$steps" --eval-every 0
          --sample-bytes 0 --quiet --run-dir "$work/$rep-$mode")
    [[ $mode == none ]] || args+=(--save-every 5)
    [[ $mode == async ]] && args+=(--async-save)
    "$bin/fsdp-run" --standalone --nproc-per-node 2 -- "$bin/fsdp-train" "${args[@]}" \
      >"$work/out" 2>&1 || { cat "$work/out" >&2; exit 1; }
    steady=$(seconds_per_step "$work/$rep-$mode" 16)
    s=$(seconds_per_step "$work/$rep-$mode")
    [[ $mode == none ]] && none=$s none_steady=$steady
    printf '%-6s %-6s %12.3f %8.3f %12.3f %8.3f\n' "$rep" "$mode" "$steady" \
      "$(awk "BEGIN { print $steady / $none_steady }")" "$s" "$(awk "BEGIN { print $s / $none }")"
    rm -rf "$work/$rep-$mode"
  done
done
