#!/usr/bin/env bash
# The GPU check, run on the device machine (torch 2.x wheel with CUDA and
# NCCL, no package registry) from the repository root:
#   1. configure and build against the wheel's LibTorch, with the vendored
#      dependencies in .gpudeps (made here by scripts/gpu-deps.sh);
#   2. run the GPU tests (label "gpu": NCCL at world size 1, FSDP on CUDA
#      with fp32, bf16 and pinned CPU offload, fsdp-train --device cuda
#      against the same run on the CPU), then fsdp-train on the 86 M preset,
#      and libfsdp against FSDP2 (bench/peers/head_to_head.py): the 86 M and
#      1 B presets in bf16 and 96 tiny units;
#   3. run the CPU test suite under LibTorch 2.x (Gloo);
#   4. run the overhead and comm benchmarks.
# Writes gpu-check.log (and the ctest logs) to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/fsdp-gpu-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu-check.log") 2>&1
date -u
nvidia-smi -L || true
echo "cores: $(nproc)"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))'
TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
NCCL_INC=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "include"))' 2>/dev/null || true)
echo "nccl include: ${NCCL_INC:-not found}"
g++ --version | head -1; cmake --version | head -1

start=$(date +%s)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -DFSDP_DEPS_DIR="$PWD/.gpudeps" \
  -DFSDP_NCCL_INCLUDE_DIR="$NCCL_INC" -DCMAKE_CXX_COMPILER_LAUNCHER= > "$OUT/configure.log" 2>&1 \
  || { tail -40 "$OUT/configure.log"; exit 1; }
grep -E "libfsdp:|Torch" "$OUT/configure.log" | head -5
cmake --build build-gpu -j "$(nproc)" -- -k 0 > "$OUT/build.log" 2>&1
build_rc=$?
echo "build rc=$build_rc in $(( $(date +%s) - start )) s"
if [[ $build_rc -ne 0 ]]; then grep -E "error|Error" -A3 "$OUT/build.log" | head -60; fi

cd build-gpu
echo "== GPU tests =="
ctest -L gpu --output-on-failure --timeout 300 2>&1 | tail -25
echo "== fsdp-train --device cuda, gpt2-small-bytes, bf16 =="
timeout 240 bin/fsdp-train --device cuda --preset gpt2-small-bytes --mixed-precision bf16 \
  --batch 8 --steps 30 --warmup 5 --eval-every 0 --sample-bytes 0 --log-every 5 \
  --data ../tests/data/corpus.txt --run-dir "$OUT/train-gpt2-small-bytes" 2>&1 | tail -25
echo "== libfsdp against FSDP2 on this GPU (bench/peers/head_to_head.py) =="
h2h() { timeout 240 python3 ../bench/peers/head_to_head.py --bin bin --device cuda \
          --data ../tests/data/corpus.txt --work "$OUT/h2h-$1" "${@:2}" 2>&1 | tail -12; }
h2h gpt2-small --preset gpt2-small-bytes --batch 8 --mixed-precision bf16 --rounds 3 --steps 12
h2h gpt-1b --preset gpt-1b --batch 4 --mixed-precision bf16 --rounds 2 --steps 8
h2h tiny-units --layers 96 --width 64 --heads 2 --context 64 --batch 8 --rounds 3 --steps 12
echo "== CPU suite under LibTorch 2.x =="
OMP_NUM_THREADS=1 ctest -LE gpu -j 12 --timeout 300 > "$OUT/ctest-cpu.log" 2>&1
grep -E "tests passed|tests failed|\*\*\*Failed|\*\*\*Timeout|Not Run" "$OUT/ctest-cpu.log" | head -60
# The failures' own output, for the record in docs/gpu.md.
OMP_NUM_THREADS=1 ctest --rerun-failed --output-on-failure --timeout 300 > "$OUT/failures.log" 2>&1 || true
cd ..
echo "== benchmarks =="
timeout 120 build-gpu/bin/fsdp-bench overhead || true
timeout 120 build-gpu/bin/fsdp-bench comm --world-size 2 --max-mib 16 || true
echo "total $(( $(date +%s) - start )) s"
