#!/usr/bin/env bash
# The demo GPT trained three times on two ranks, with the same steps, data and
# seed, and fp32, bf16 and int8 communication (--compress-weights and
# --compress-grads alike); prints each run's final validation loss against the
# uncompressed one and plots the curves for docs/compressed-communication.md.
#
#   scripts/compression-curves.sh [extra fsdp-train flags]
#   STEPS=500 OUT=docs/images/compressed-communication.png BUILD_DIR=build
#
# Needs a build (make build), gnuplot (scripts/install-deps.sh installs it)
# and jq. About 2-3 minutes a run on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
STEPS=${STEPS:-500}
OUT=${OUT:-docs/images/compressed-communication.png}
for tool in gnuplot jq; do
  command -v "$tool" >/dev/null || { echo "compression-curves: $tool is not installed (apt-get install $tool)" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for format in none bf16 int8; do
  echo "training with $format communication..."
  "$BUILD_DIR/bin/fsdp-run" --standalone --nproc-per-node 2 -- "$BUILD_DIR/bin/fsdp-train" \
    --steps "$STEPS" --eval-every 50 --sample-bytes 0 --quiet \
    --compress-weights "$format" --compress-grads "$format" --run-dir "$work/$format" "$@" >/dev/null
  jq -r 'select(.val_loss != null) | "\(.step)\t\(.val_loss)"' "$work/$format/metrics.jsonl" >"$work/$format.val"
  jq -r '"\(.step)\t\(.loss)"' "$work/$format/metrics.jsonl" >"$work/$format.train"
done

final() { tail -n 1 "$work/$1.val" | cut -f2; }
echo
printf '%-6s %-12s %s\n' format "final val" "vs fp32"
for format in none bf16 int8; do
  awk -v f="$format" -v v="$(final "$format")" -v base="$(final none)" \
    'BEGIN { printf "%-6s %-12.5f %+.3f%%\n", f, v, (v / base - 1) * 100 }'
done

gnuplot <<EOF
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
  set terminal pngcairo size 1000,420 font "sans,10"
} else {
  set terminal png size 1000,420
}
set output "$OUT"
set multiplot layout 1,2 title "demo GPT, 2 ranks, $STEPS steps: communication in fp32, bf16 and int8"
set xlabel "step"; set ylabel "nats/byte"; set grid
set title "training loss"
plot "$work/none.train" using 1:2 with lines lw 1 title "fp32", \
     "$work/bf16.train" using 1:2 with lines lw 1 title "bf16", \
     "$work/int8.train" using 1:2 with lines lw 1 title "int8"
set title "validation loss"
plot "$work/none.val" using 1:2 with linespoints lw 2 title "fp32", \
     "$work/bf16.val" using 1:2 with linespoints lw 2 title "bf16", \
     "$work/int8.val" using 1:2 with linespoints lw 2 title "int8"
unset multiplot
EOF
echo "wrote $OUT"
