#!/usr/bin/env bash
# The LibTorch 2.6 leg of CI: builds this tree in the Debian 13 root made by
# scripts/libtorch2-root.sh (against its LibTorch 2.6, GCC 14, CLI11 2.4...)
# and runs the whole CTest suite there, as `make test` does against the
# host's 1.13. The build goes to build-libtorch2/ (FSDP_LIBTORCH2_BUILD), its
# ccache to a directory outside the tree, so a second run is fast.
# FSDP_LIBTORCH2_CMAKE_FLAGS adds CMake flags (CI: -DFSDP_WERROR=ON).
set -euo pipefail
cd "$(dirname "$0")/.."

build=${FSDP_LIBTORCH2_BUILD:-build-libtorch2}
cmake_flags=${FSDP_LIBTORCH2_CMAKE_FLAGS:-}
jobs=${JOBS:-2}
start=$(date +%s)

status=0
scripts/libtorch2-root.sh bash -c "
  set -e
  cd /src
  cmake -S . -B '$build' $cmake_flags >/dev/null
  cmake --build '$build' -j $jobs
  echo \"test-libtorch2: built in \$((\$(date +%s) - $start)) s; running the suite\"
  cd '$build'
  ctest --output-on-failure -j $jobs --timeout 600
" || status=$?

echo "test-libtorch2: LibTorch 2.6 leg (root, build, tests) took $(($(date +%s) - start)) s," \
  "exit status $status"
exit "$status"
