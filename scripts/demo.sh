#!/usr/bin/env bash
# The main job: a byte-level GPT trained with FSDP on two local ranks.
#   scripts/demo.sh                 the demo (500 steps, at most 3 minutes of training)
#   scripts/demo.sh --steps 100     any fsdp-train options instead of the demo's
# `make demo` installs what is missing (scripts/install-deps.sh: fortunes,
# gnuplot-nox, ...), builds, and runs this.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
for bin in fsdp-train fsdp-run; do
  if [[ ! -x "$BUILD_DIR/bin/$bin" ]]; then
    echo "demo: $BUILD_DIR/bin/$bin is not built; run \`make demo\` (or \`make build\`) first" >&2
    exit 1
  fi
done
if (($# == 0)); then
  # The defaults are sized for a 2-core machine (about 0.2-0.3 s a step at 2
  # ranks); the time budget keeps the demo to about 3 minutes on a slower or
  # busy machine, and the loss is well below 2.5 nats/byte by then.
  set -- --time-budget 180
fi
exec "$BUILD_DIR/bin/fsdp-run" --standalone --nproc-per-node 2 -- "$BUILD_DIR/bin/fsdp-train" "$@"
