#!/usr/bin/env bash
# What checkpoints cost training (issue #33): a 57 M-parameter GPT (8 blocks
# of width 768) at 2 ranks, trained with no step checkpoints, with
# synchronous ones every 5 steps and with --async-save ones every 5 steps,
# the three interleaved in each of REPS rounds (default 2), each round in
# another order (none-sync-async, sync-async-none, async-none-sync, ...) so
# that no mode always runs first. Prints, per mode, the ratio of its wall
# time per step to the run without saves of the same round, three times
# (and "s/step", the whole run's):
# - "steady": from step 1 to step 16, three saves in 15 steps (each save's
#   cost falls in the step after it), the step time of a long run;
# - "later": from step 6 to step 16, the saves of steps 10 and 15 in 10
#   steps: a long run's cost per save, without the first save's one-time
#   cost (an asynchronous saver maps its host memory then);
# - "whole run": from step 1 to the last, which adds the last step's
#   validation and, before it, the save of step 20 (a background one must
#   end before the final checkpoint).
# Runs follow each other, so the machine's drift between them enters those
# ratios: on this project's VM the same run varies by up to 10% from one
# run to the next. Hence three figures taken inside each run:
# - "pace": the median of steps 3 to 20 that follow no save (the two after
#   each save of steps 5, 10, 15 and 20 are left out), over the run without
#   saves' median: the drift, and any slowing of the steps a save does not
#   touch;
# - "s/save": the mean over the saves of steps 10 and 15 of the wall time of
#   the two steps after each (a background write may outlast the first),
#   less twice that median;
# - "in-run": one plus s/save over five median steps, the step time a save
#   every 5 steps costs in its own run. The run without saves gets it too:
#   there it is the method's noise.
# After the rounds, a "median" line per mode gives each column's median
# over the rounds.
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
read -r -a extra <<<"${FSDP_BENCH_TRAIN_ARGS:---batch 4 --context 128}"
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

# The median of the numbers on stdin, one per line.
median() {
  sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# The median of steps 3 to 20 that follow no save, from step_seconds lines.
median_step() {
  awk '$1 >= 3 && $1 <= 20 && ($1 - 1) % 5 > 1 { print $2 }' | median
}

# "MEDIAN S/SAVE IN-RUN" for a run dir: see the top of this file.
in_run_figures() {
  local steps median
  steps=$(step_seconds "$1")
  median=$(median_step <<<"$steps")
  awk -v median="$median" '$1 >= 11 && $1 <= 17 && ($1 - 1) % 5 <= 1 { sum += $2 - median }
    END { printf "%s %.3f %.3f", median, sum / 2, 1 + sum / 2 / (5 * median) }' <<<"$steps"
}

# Trains one run of MODE into run dir DIR.
train() {
  local mode=$1 dir=$2
  local args=(--layers 8 --width 768 --heads 12 "${extra[@]}" --steps "$steps" --eval-every 0
              --sample-bytes 0 --quiet --run-dir "$dir")
  [[ $mode == none ]] || args+=(--save-every 5)
  [[ $mode == async ]] && args+=(--async-save)
  "$bin/fsdp-run" --standalone --nproc-per-node 2 -- "$bin/fsdp-train" "${args[@]}" \
    >"$work/out" 2>&1 || { cat "$work/out" >&2; exit 1; }
}

# "STEADY LATER WHOLE MEDIAN S/SAVE IN-RUN" for a run dir: seconds per step
# over steps 1-16, 6-16 and the whole run, then in_run_figures.
run_figures() {
  echo "$(seconds_per_step "$1" 1 16) $(seconds_per_step "$1" 6 16)" \
    "$(seconds_per_step "$1" 1 0) $(in_run_figures "$1")"
}

echo "57 M GPT (--layers 8 --width 768 --heads 12 ${extra[*]}), 2 ranks, $steps steps," \
  "checkpoints every 5; $(nproc) cores"
printf '%-6s %-6s %7s %7s %7s %8s | %7s %7s %7s\n' round mode steady later whole s/step \
  pace s/save in-run
modes=(none sync async)
for rep in $(seq 1 "$reps"); do
  declare -A figures=()
  for k in 0 1 2; do
    mode=${modes[(rep - 1 + k) % 3]}
    train "$mode" "$work/run"
    figures[$mode]=$(run_figures "$work/run")
    rm -rf "$work/run"
  done
  for mode in "${modes[@]}"; do
    # Each mode's seconds over the run without saves', as ratios.
    read -r steady later whole median per_save in_run <<<"${figures[$mode]}"
    read -r n_steady n_later n_whole n_median _ <<<"${figures[none]}"
    awk -v rep="$rep" -v mode="$mode" \
      "BEGIN { printf \"%-6s %-6s %7.3f %7.3f %7.3f %8.3f | %7.3f %7.3f %7.3f\\n\", rep, mode,
               $steady / $n_steady, $later / $n_later, $whole / $n_whole, $whole,
               $median / $n_median, $per_save, $in_run }" | tee -a "$work/table"
  done
done
# Each column's median over the rounds, per mode.
for mode in "${modes[@]}"; do
  medians=()
  for column in 3 4 5 6 8 9 10; do
    medians+=("$(awk -v mode="$mode" -v c="$column" '$2 == mode { print $c }' "$work/table" | median)")
  done
  printf '%-6s %-6s %7.3f %7.3f %7.3f %8.3f | %7.3f %7.3f %7.3f\n' median "$mode" "${medians[@]}"
done
