#!/usr/bin/env bash
# The GPU check: running this on the device machine (one GPU, a torch 2.x
# wheel with CUDA and NCCL, no package registry), whole or as its two parts,
# is the whole check. From the repository root, with .gpudeps carried
# (scripts/gpu-deps.sh makes it):
#   bash scripts/gpu-check.sh [all|tests|speed]
# It builds only what it runs, then, most valuable first:
#   tests: the GPU tests (ctest -L gpu): NCCL at world size 1, the multi-rank
#      lane at world sizes 2-4 on the one GPU (Gloo with host staging), the
#      sync check, fsdp-train on CUDA against the CPU; the cases that crashed
#      under the wheel before run first, so their answer comes back even
#      when the rest runs out of time (docs/gpu.md, "Prepared since the
#      last run");
#   speed: libfsdp against FSDP2 (bench/peers/head_to_head.py): the 1 B
#      preset in bf16 also against FSDP2 with compiled blocks and against
#      the same GPT without FSDP (local-gpt), 96 tiny blocks in fp32, the
#      86 M preset in bf16 (also without FSDP); then where a 1 B step's time
#      goes (fsdp-train --phase-times).
# "all" (the default) runs both. Where one call may run at most 10 minutes
# (the device tool), run "tests" and "speed" as two calls: the second finds
# the build of the first when the machine is still warm, else rebuilds.
# Each step has a time limit and the whole script a deadline (FSDP_GPU_DEADLINE
# seconds, default 480: build included, the 8 minutes docs/gpu.md plans for).
# Logs go to $OUT (default /tmp/fsdp-gpu-out): gpu-check.log, then one log
# per step; big outputs (run dirs, checkpoints) stay under /tmp.
set -uo pipefail
part=${1:-all}
case $part in
  all | tests | speed) ;;
  *) echo "gpu-check.sh: unknown part '$part'; give all, tests or speed" >&2; exit 2 ;;
esac
OUT=${OUT:-/tmp/fsdp-gpu-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu-check.log") 2>&1
start=$(date +%s)
deadline=$((start + ${FSDP_GPU_DEADLINE:-480}))
left() { echo $((deadline - $(date +%s))); }
# step SECONDS NAME CMD...: runs CMD with at most SECONDS (or what is left),
# its output in $OUT/NAME.log, and says how it went.
step() {
  local limit=$1 name=$2
  shift 2
  local budget
  budget=$(left)
  ((budget > limit)) || limit=$budget
  if ((limit < 20)); then echo "== $name: skipped, $budget s left"; return 1; fi
  echo "== $name (limit ${limit} s)"
  local t0=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "   rc=$rc in $((SECONDS - t0)) s"
  return $rc
}

date -u
nvidia-smi -L || true
echo "cores: $(nproc), commit: ${FSDP_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))'
TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
# What the wheel exports of std::filesystem: see [Note: no std::filesystem
# tree walks beside a torch wheel] in include/fsdp/file_tree.h.
TORCH_LIB=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
nm -D --defined-only "$TORCH_LIB/libtorch_cpu.so" | c++filt | grep 'std::filesystem' \
  > "$OUT/wheel-filesystem-symbols.txt" || true
echo "libtorch_cpu.so exports $(wc -l < "$OUT/wheel-filesystem-symbols.txt") std::filesystem" \
  "symbols ($(grep -c recursive_directory_iterator "$OUT/wheel-filesystem-symbols.txt") of" \
  "recursive_directory_iterator): wheel-filesystem-symbols.txt"
NCCL_INC=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "include"))' 2>/dev/null || true)

# Gloo's headers (the wheel ships none): Debian's, named explicitly; see
# docs/gpu.md on what that pairing assumes.
step 120 configure cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -DFSDP_DEPS_DIR="$PWD/.gpudeps" \
  -DFSDP_GLOO_INCLUDE_DIR="$PWD/.gpudeps/gloo-include" \
  -DFSDP_NCCL_INCLUDE_DIR="$NCCL_INC" -DCMAKE_CXX_COMPILER_LAUNCHER= \
  || { tail -30 "$OUT/configure.log"; exit 1; }
grep -E "libfsdp:" "$OUT/configure.log"
targets=(fsdp-run fsdp-train)  # what the part run needs, no more
[[ $part == speed ]] || targets+=(test_gpu test_gpu_trainer test_gpu_multirank)
[[ $part == tests ]] || targets+=(local-gpt)
# -k 0: a target that fails to compile leaves the others to run.
step 240 build cmake --build build-gpu -j "$(nproc)" --target "${targets[@]}" -- -k 0 \
  || grep -E "error" -A3 "$OUT/build.log" | head -40

cd build-gpu || exit 1
data=../tests/data/corpus.txt

run_tests() {
  local crashed_before='^(GpuTrainer|GpuLaneCheckpoint)\.'
  step 150 ctest-crashed-before ctest -L gpu -R "$crashed_before" -j 3 --output-on-failure \
    --timeout 140
  grep -E "tests passed|tests failed|\*\*\*|Failed|Exception" "$OUT/ctest-crashed-before.log"
  step 200 ctest-gpu ctest -L gpu -E "$crashed_before" -j 4 --output-on-failure --timeout 180
  grep -E "tests passed|tests failed|\*\*\*|Failed|Exception" "$OUT/ctest-gpu.log" | head -40
}

h2h() {
  local name=$1 limit=$2
  shift 2
  step "$limit" "h2h-$name" env PYTHONUNBUFFERED=1 python3 ../bench/peers/head_to_head.py \
    --bin bin --device cuda --data "$data" --work "/tmp/fsdp-h2h-$name" "$@"
  tail -18 "$OUT/h2h-$name.log"
}

run_speed() {
  h2h gpt-1b 240 --preset gpt-1b --batch 8 --mixed-precision bf16 --rounds 2 --steps 8 \
    --compiled-peer --no-fsdp
  h2h tiny-units 90 --layers 96 --width 64 --heads 2 --context 64 --batch 8 --rounds 2 --steps 12
  h2h gpt2-small 100 --preset gpt2-small-bytes --batch 16 --mixed-precision bf16 --rounds 2 \
    --steps 12 --no-fsdp
  step 90 profile-1b bin/fsdp-train --device cuda --preset gpt-1b --batch 8 --mixed-precision bf16 \
    --steps 7 --warmup 2 --eval-every 0 --sample-bytes 0 --log-every 1 --phase-times \
    --data "$data" --run-dir /tmp/fsdp-profile-1b
  sed -n '/phases/,$p' "$OUT/profile-1b.log"
}

[[ $part == speed ]] || run_tests
[[ $part == tests ]] || run_speed
echo "total $(( $(date +%s) - start )) s"
