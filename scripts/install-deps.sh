#!/usr/bin/env bash
# Installs the Debian packages libfsdp needs, and only those that are missing,
# so `make test` and `make demo` work on a fresh Debian 12 machine.
#   scripts/install-deps.sh [PACKAGE...]
# With packages named, installs those instead, the same way (scripts/lint.sh
# asks for clang-tidy and clang-format, which only the checks need).
set -euo pipefail

packages=(
  build-essential cmake ccache
  libtorch-dev libgloo-dev        # LibTorch 1.13.1 with c10d/Gloo headers
  libopenblas0-openmp             # 30x faster matmul than Debian's reference BLAS
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev libfmt-dev libxxhash-dev
  rapidjson-dev                   # the library's JSON (src/json/json_io.h)
  gnuplot-nox fortunes            # the demo's plot and default corpus
  openmpi-bin libopenmpi-dev      # the mpirun launch test
  iproute2                        # the two-host network-namespace test
)
if (($# > 0)); then packages=("$@"); fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "install-deps: installing missing packages: ${missing[*]}"
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
