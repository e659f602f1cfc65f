#!/usr/bin/env bash
# What checkpoints cost training (issue #33): a 57 M-parameter GPT (8 blocks
# of width 768) at 2 ranks, trained with no step checkpoints, with
# synchronous ones every 5 steps and with --async-save ones every 5 steps,
# the three interleaved in each of REPS rounds (default 2). Prints, per
# mode, the ratio of its wall time per step to the run without saves of the
# same round, three times (and "s/step", the whole run's):
# - "steady": from step 1 to step 16, three saves in 15 steps (each save's
#   cost falls in the step after it), the step time of a long run;
# - "later": from step 6 to step 16, the saves of steps 10 and 15 in 10
#   steps: a long run's cost per save, without the first save's one-time
#   cost (an asynchronous saver maps its host memory then);
# - "whole run": from step 1 to the last, which adds the last step's
#   validation and, before it, the save of step 20 (a background one must
#   end before the final checkpoint).
# Runs follow each other, so the machine's drift between them (about +-5%
# on this project's VM) enters those ratios. Hence a fourth figure, taken
# inside each run: "s/save", the mean over the saves of steps 10 and 15 of
# the wall time of the two steps after each (a background write may outlast
# the first) less twice the median of steps 3 to 20 outside those pairs
# (and the first save's), and "in-run", one plus that over five such median
# steps. The run without saves gets them too: its s/save is the method's
# noise.
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
((steps >= 21)) || { echo "async-save-bench: STEPS must be at least 21 (the in-run figure reads steps 3-20), got $steps" >&2; exit 1; }
for tool in fsdp-run fsdp-train; do
  [[ -x $bin/$tool ]] || { echo "async-save-bench: $bin/$tool is missing; run make first" >&2; exit 1; }
done

# Seconds per step from step FIRST to step LAST (0: the last), from
# metrics.jsonl's elapsed_s.
seconds_per_step() {
  grep '"step"' "$1/metrics.jsonl" |
    sed -E 's/.*"step":([0-9]+).*"elapsed_s":([0-9.eE+-]+).*/\1 \2/' |
    awk -v first="$2" -v last="$3" '$1 == first { s0 = $1; e0 = $2 }
      last == 0 || $1 <= last { s = $1; e = $2 } END { print (e - e0) / (s - s0) }'
}

# "STEP SECONDS" for steps 2 to the last: the wall time since the step before.
step_seconds() {
  grep '"step"' "$1/metrics.jsonl" |
    sed -E 's/.*"step":([0-9]+).*"elapsed_s":([0-9.eE+-]+).*/\1 \2/' |
    awk 'NR > 1 { print $1, $2 - e } { e = $2 }'
}

# "S/SAVE IN-RUN" for a run dir: see the top of this file.
cost_per_save() {
  local steps median
  steps=$(step_seconds "$1")
  median=$(awk '$1 >= 3 && $1 <= 20 && ($1 - 1) % 5 > 1 { print $2 }' <<<"$steps" |
    sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
  awk -v median="$median" '$1 >= 11 && $1 <= 17 && ($1 - 1) % 5 <= 1 { sum += $2 - median }
    END { printf "%.3f %.3f", sum / 2, 1 + sum / 2 / (5 * median) }' <<<"$steps"
}

echo "57 M GPT (--layers 8 --width 768 --heads 12 $extra), 2 ranks, $steps steps," \
  "checkpoints every 5; $(nproc) cores"
printf '%-6s %-6s %7s %7s %7s %8s | %7s %7s\n' round mode steady later "whole" "s/step" s/save in-run
ratio() { awk "BEGIN { print $1 / $2 }"; }
for rep in $(seq 1 "$reps"); do
  none="" none_steady="" none_later=""
  for mode in none sync async; do
    args=(--layers 8 --width 768 --heads 12 $extra --steps "$steps" --eval-every 0
          --sample-bytes 0 --quiet --run-dir "$work/$rep-$mode")
    [[ $mode == none ]] || args+=(--save-every 5)
    [[ $mode == async ]] && args+=(--async-save)
    "$bin/fsdp-run" --standalone --nproc-per-node 2 -- "$bin/fsdp-train" "${args[@]}" \
      >"$work/out" 2>&1 || { cat "$work/out" >&2; exit 1; }
    steady=$(seconds_per_step "$work/$rep-$mode" 1 16)
    later=$(seconds_per_step "$work/$rep-$mode" 6 16)
    s=$(seconds_per_step "$work/$rep-$mode" 1 0)
    [[ $mode == none ]] && none=$s none_steady=$steady none_later=$later
    read -r per_save in_run <<<"$(cost_per_save "$work/$rep-$mode")"
    printf '%-6s %-6s %7.3f %7.3f %7.3f %8.3f | %7.3f %7.3f\n' "$rep" "$mode" \
      "$(ratio "$steady" "$none_steady")" "$(ratio "$later" "$none_later")" "$(ratio "$s" "$none")" \
      "$s" "$per_save" "$in_run"
    rm -rf "$work/$rep-$mode"
  done
done
