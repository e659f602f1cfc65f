#!/usr/bin/env bash
# The package as a user gets it (CTest test Install.FindPackageAndAddSubdirectory,
# label "install"; tests/CMakeLists.txt registers it):
#  1. `cmake --install` the build into a fresh prefix; every installed program
#     and the library find their libraries from there (RUNPATH), not the build;
#     the headers installed are exactly those docs/using-libfsdp.md lists;
#  2. examples/consumer, a project with only find_package(fsdp) and
#     fsdp::fsdp, configures and builds against the prefix, and on 2 ranks
#     under the INSTALLED fsdp-run prints exactly the lines that the in-tree
#     examples/train_mlp prints under the same launcher;
#  3. examples/subdirectory builds libfsdp with add_subdirectory without
#     looking for CLI11, fmt, nlohmann-json, GoogleTest or Google Benchmark,
#     builds no tools or tests, and its program prints the same lines too.
#
#   tests/install_check.sh SOURCE_DIR BUILD_DIR WORK_DIR
# Environment: Torch_DIR, FSDP_DEPS_DIR, CMAKE_BUILD_TYPE (from the build's
# cache, passed on so both projects build as the tree does).
#
# WORK_DIR keeps the two projects' build folders between runs, so a rerun only
# rebuilds what changed (and ccache serves a first build it has seen); the
# prefix is made afresh every run.
set -euo pipefail

src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
work=$3
steps=8
mkdir -p "$work"
work=$(cd "$work" && pwd)
prefix=$work/prefix

fail() {
  echo "install_check: FAIL: $*" >&2
  exit 1
}

cmake_args=(-DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}")
[[ -n "${Torch_DIR:-}" ]] && cmake_args+=(-DTorch_DIR="$Torch_DIR")
command -v ccache >/dev/null && cmake_args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

echo "== 1. cmake --install $build --prefix $prefix"
rm -rf "$prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log" || {
  cat "$work/install.log"
  fail "cmake --install failed"
}
for f in lib/cmake/fsdp/fsdpConfig.cmake lib/cmake/fsdp/fsdpConfigVersion.cmake \
         lib/cmake/fsdp/fsdpTargets.cmake include/fsdp/fsdp.h bin/fsdp-run bin/fsdp-train \
         bin/fsdp-ckpt bin/fsdp-plan bin/fsdp-bench libexec/libfsdp/dcp_convert.py; do
  [[ -e "$prefix/$f" ]] || fail "$f is not installed (ls $prefix: $(ls -R "$prefix" | head -50))"
done
[[ ! -e "$prefix/include/fsdp/models" ]] || fail "the demo GPT's header was installed"
# The installed headers are exactly those docs/using-libfsdp.md lists under
# "The headers" (its table rows: | `fsdp/x.h` | ... |), and each one includes
# only installed headers of ours, so a consumer never reaches an internal one.
documented=$(sed -n 's/^| `\(fsdp\/[a-z_/]*\.h\)` |.*/\1/p' "$src/docs/using-libfsdp.md" | sort)
[[ -n "$documented" ]] || fail "found no header table in $src/docs/using-libfsdp.md"
installed=$(cd "$prefix/include" && find fsdp -type f | sort)
if extra=$(comm -13 <(echo "$documented") <(echo "$installed")) && [[ -n "$extra" ]]; then
  fail "installed but not documented in docs/using-libfsdp.md: $(echo $extra). List it under" \
    "\"The headers\" if it is API, or move it to src/ (or exclude it in cmake/install.cmake)"
fi
if missing=$(comm -23 <(echo "$documented") <(echo "$installed")) && [[ -n "$missing" ]]; then
  fail "documented in docs/using-libfsdp.md but not installed: $(echo $missing)"
fi
for header in $installed; do
  for included in $(sed -n 's/^#include "\(fsdp\/[^"]*\)".*/\1/p' "$prefix/include/$header"); do
    [[ -e "$prefix/include/$included" ]] ||
      fail "$header includes $included, which is not installed (internal headers belong in src/)"
  done
done
lib=$(ls "$prefix"/lib*/libfsdp.so 2>/dev/null | head -1)
[[ -n "$lib" ]] || fail "libfsdp.so is not installed under $prefix/lib*"
# Every installed binary resolves libfsdp from the prefix and nothing is missing.
for f in "$lib" "$prefix"/bin/*; do
  deps=$(ldd "$f")
  if grep -q "not found" <<<"$deps"; then fail "$f: $(grep 'not found' <<<"$deps")"; fi
  if grep -q "$build/lib/" <<<"$deps"; then fail "$f loads from the build tree: $(grep "$build/lib/" <<<"$deps")"; fi
  if [[ "$f" != "$lib" ]] && grep -q "libfsdp.so" <<<"$deps" && ! grep -q "=> $prefix/" <<<"$(grep libfsdp.so <<<"$deps")"; then
    fail "$f does not load libfsdp from $prefix: $(grep libfsdp.so <<<"$deps")"
  fi
done

echo "== 2. examples/consumer against the prefix (find_package)"
cmake -S "$src/examples/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
  "${cmake_args[@]}" >"$work/consumer-configure.log" || {
  cat "$work/consumer-configure.log"
  fail "configuring examples/consumer against $prefix failed"
}
cmake --build "$work/consumer" -j 2 >"$work/consumer-build.log" 2>&1 || {
  cat "$work/consumer-build.log"
  fail "building examples/consumer failed"
}
# [Note: no `grep -q` behind a pipe] Under pipefail, `cmd | grep -q` fails
# when grep matches and exits before cmd has written everything: cmd dies of
# SIGPIPE (141) and the pipeline reports it. A match then reads as a miss,
# at random (CI saw it here). Every check below greps a captured string.
app_deps=$(ldd "$work/consumer/app")
grep -q "libfsdp.so.* => $prefix/" <<<"$app_deps" ||
  fail "app does not load libfsdp from $prefix: $(grep fsdp <<<"$app_deps")"

# "[rank 0] step N loss X" and "[rank 0] rank 0 holds ..." lines, in order.
run_two_ranks() {
  local out=$1
  shift
  OMP_NUM_THREADS=1 "$prefix/bin/fsdp-run" --standalone --nproc-per-node 2 -- "$@" \
    --steps "$steps" >"$out.log" 2>&1 || {
    cat "$out.log"
    fail "fsdp-run -- $* failed"
  }
  grep -E '^\[rank 0\] (step [0-9]+ loss|rank 0 holds)' "$out.log" >"$out.lines" || true
}
run_two_ranks "$work/intree" "$build/bin/train_mlp"
run_two_ranks "$work/consumer-run" "$work/consumer/app"
[[ $(grep -c ' loss ' "$work/intree.lines") == "$steps" ]] ||
  fail "train_mlp printed no $steps losses: $(cat "$work/intree.log")"
diff -u "$work/intree.lines" "$work/consumer-run.lines" ||
  fail "examples/consumer's lines differ from train_mlp's (above)"

echo "== 3. examples/subdirectory (add_subdirectory)"
# [Note: the subdirectory case builds as one unity]
# This step compiles the library a second time, with flags of its own, so
# ccache never serves it from the main build: cold, it took 513 s of CI's 2
# cores in each LibTorch leg, and 146 s as a unity build (measured back to
# back with ccache off, LibTorch 1.13). A unity build parses
# LibTorch's headers once per batch of sources instead of once per source,
# and what this step checks (what configuring looks for, what gets built,
# what the program prints) does not depend on how the sources are batched.
sub_args=(-DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=16)
# A fresh cache, so the check below sees what configuring looks for now, not
# entries an earlier run left (the objects are kept; only configuring reruns).
rm -f "$work/subdirectory/CMakeCache.txt"
[[ -n "${FSDP_DEPS_DIR:-}" ]] && sub_args+=(-DFSDP_DEPS_DIR="$FSDP_DEPS_DIR")
cmake -S "$src/examples/subdirectory" -B "$work/subdirectory" -DFSDP_SOURCE_DIR="$src" \
  "${cmake_args[@]}" "${sub_args[@]}" >"$work/subdirectory-configure.log" || {
  cat "$work/subdirectory-configure.log"
  fail "configuring examples/subdirectory failed"
}
# What configuring looked for: none of the tools' or tests' dependencies.
if found=$(grep -E '^(CLI11|fmt|nlohmann_json|GTest|GTEST|gtest|benchmark)[A-Za-z_]*(_DIR|_LIBRARY|_INCLUDE_DIR)[:=]' \
  "$work/subdirectory/CMakeCache.txt"); then
  fail "add_subdirectory looked for a tool or test dependency: $found"
fi
sub_targets=$(cmake --build "$work/subdirectory" --target help)
for target in fsdp-run fsdp-train fsdp-bench test_comm fsdp_models; do
  if grep -qx "\.\.\. $target" <<<"$sub_targets"; then
    fail "add_subdirectory defines $target; only the library should be built"
  fi
done
cmake --build "$work/subdirectory" -j 2 >"$work/subdirectory-build.log" 2>&1 || {
  cat "$work/subdirectory-build.log"
  fail "building examples/subdirectory failed"
}
run_two_ranks "$work/subdirectory-run" "$work/subdirectory/app"
diff -u "$work/intree.lines" "$work/subdirectory-run.lines" ||
  fail "examples/subdirectory's lines differ from train_mlp's (above)"

echo "install_check: OK ($steps steps, $(wc -l <"$work/intree.lines") lines equal)"
