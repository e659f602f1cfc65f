#!/usr/bin/env bash
# The main job: a GPT trained with FSDP on two local ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -x build/bin/fsdp-train || ! -x build/bin/fsdp-run ]]; then
  echo "demo: build/bin/fsdp-train and build/bin/fsdp-run are not built yet." >&2
  echo "demo: it will run: fsdp-run --standalone --nproc-per-node 2 -- fsdp-train" >&2
  exit 1
fi
exec build/bin/fsdp-run --standalone --nproc-per-node 2 -- build/bin/fsdp-train "$@"
