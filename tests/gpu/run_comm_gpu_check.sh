#!/usr/bin/env bash
# Builds src/comm + tests/gpu/comm_gpu_check.cpp with plain g++ against the
# LibTorch of the `python3` torch (a CUDA 2.x wheel on GPU machines), or
# against Debian's /usr LibTorch when no Python torch is found, and runs it.
# Usage: tests/gpu/run_comm_gpu_check.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build-gpu-check}
mkdir -p "$out"

flags=(-std=c++17 -O1 -fPIC -fmax-errors=5 -Iinclude -Isrc -DUSE_C10D_GLOO=1)
libs=()
if python3 -c 'import torch' 2>/dev/null; then
  eval "$(python3 - <<'PY'
import glob, os, torch
root = os.path.dirname(torch.__file__)
inc = [os.path.join(root, "include"), os.path.join(root, "include/torch/csrc/api/include")]
# CUDA and NCCL headers come from the nvidia-* wheels next to torch.
nv = os.path.join(os.path.dirname(root), "nvidia")
inc += sorted(glob.glob(os.path.join(nv, "*", "include"))) + sorted(glob.glob(os.path.join(nv, "cu*", "include")))
print("TORCH_INC=(" + " ".join(repr(i) for i in inc) + ")")
print("TORCH_LIB=" + repr(os.path.join(root, "lib")))
print("CXX11_ABI=" + str(int(torch._C._GLIBCXX_USE_CXX11_ABI)))
print("HAS_CUDA=" + str(int(torch.cuda.is_available())))
print("TORCH_VERSION=" + repr(torch.__version__))
PY
)"
  echo "torch $TORCH_VERSION (cuda available: $HAS_CUDA)"
  for i in "${TORCH_INC[@]}"; do flags+=(-isystem "$i"); done
  [[ -d /usr/local/cuda/include ]] && flags+=(-isystem /usr/local/cuda/include)
  # Torch wheels ship no Gloo headers; FSDP_GLOO_INCLUDE points at a copy
  # (e.g. Debian's libgloo-dev /usr/include).
  [[ -n ${FSDP_GLOO_INCLUDE:-} ]] && flags+=(-isystem "$FSDP_GLOO_INCLUDE")
  echo "include dirs: ${TORCH_INC[*]}"
  flags+=(-D_GLIBCXX_USE_CXX11_ABI=$CXX11_ABI)
  libs+=(-L"$TORCH_LIB" -Wl,-rpath,"$TORCH_LIB" -ltorch -ltorch_cpu -lc10)
  if [[ $HAS_CUDA == 1 ]]; then
    flags+=(-DFSDP_WITH_NCCL=1 -DUSE_C10D_NCCL=1)
    libs+=(-ltorch_cuda -lc10_cuda)
  fi
else
  echo "no python torch; using /usr LibTorch"
  flags+=(-D_GLIBCXX_USE_CXX11_ABI=1 -isystem /usr/include/torch/csrc/api/include)
  libs+=(-ltorch -ltorch_cpu -lc10)
fi

# src/comm uses fsdp::error_message; everything else stays out.
srcs=(src/comm/*.cpp src/error_message.cpp tests/gpu/comm_gpu_check.cpp)
printf '%s\n' "${srcs[@]}" | xargs -P "$(nproc)" -I{} sh -c \
  'g++ "$@" -c "{}" -o "'"$out"'/$(basename {} .cpp).o"' _ "${flags[@]}"
g++ "$out"/*.o -o "$out/comm_gpu_check" "${libs[@]}" -pthread
"$out/comm_gpu_check"
echo "comm_gpu_check exit 0"
