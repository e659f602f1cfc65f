#!/usr/bin/env bash
# The style checks CI runs (.ci/run), before the build:
#  1. format: the C++ lines changed since BASE are as `git clang-format`
#     writes them (.clang-format); `make format` fixes them.
#  2. tree walks: no std::filesystem::remove_all or recursive_directory_iterator
#     anywhere (they crash beside a torch wheel; fsdp/file_tree.h says why
#     and what to use instead);
#  3. function size: no function over 60 lines in src/, tools/ or bench/
#     (.clang-tidy's readability-function-size, the one check it makes an
#     error). Only that check runs, as it is the one that fails; with
#     LINT_ALL_CHECKS=1 the bugprone and performance checks .clang-tidy names
#     run too and are printed (about 34 CPU-seconds a file instead of 14).
#
#   scripts/lint.sh [--all]
# Function size is checked in the files changed since BASE (and, for a
# changed header, in one file that includes it): the tree passed as a whole
# once, and a function can only grow in a file that changes, so this keeps it
# passing at a fraction of the cost. --all checks every file in src/, tools/
# and bench/: some 160 files at about 14 CPU-seconds each (each one parses
# LibTorch's headers, without the build's precompiled header), over half an
# hour of CPU, too much for every CI run.
#
# BASE: $FSDP_LINT_BASE if set, else the merge base of HEAD with main (or
# origin/main); on main itself, HEAD~1, so a CI run checks at least the last
# commit. clang-tidy reads each file's compile command from a configure of
# its own, build-lint/ (LINT_BUILD_DIR): a unity build's commands (CI builds
# so) name its batches, not the files, and a file with no command would be
# skipped unchecked. Configuring it takes seconds; nothing is built there.
# Installs clang-format and clang-tidy when missing, as
# scripts/install-deps.sh installs the rest.
set -euo pipefail
cd "$(dirname "$0")/.."

all=false
if [[ "${1:-}" == "--all" ]]; then all=true; fi
build=${LINT_BUILD_DIR:-build-lint}
jobs=${JOBS:-$(nproc)}

scripts/install-deps.sh clang-format clang-tidy

base=${FSDP_LINT_BASE:-}
if [[ -z "$base" ]]; then
  for ref in main origin/main; do
    if base=$(git merge-base HEAD "$ref" 2>/dev/null); then break; fi
  done
  if [[ -z "$base" ]]; then
    echo "lint: no branch main or origin/main to compare with; set FSDP_LINT_BASE to a commit" >&2
    exit 2
  fi
  if [[ "$base" == "$(git rev-parse HEAD)" ]]; then base=$(git rev-parse HEAD~1); fi
fi
echo "lint: checking the changes since $(git rev-parse --short "$base")"

# 1. Format, on the changed lines only (older code keeps its line breaks).
format_diff=$(git clang-format --style file --diff "$base" -- '*.cpp' '*.h' 2>&1) || true
if grep -q '^diff --git' <<<"$format_diff"; then
  echo "$format_diff"
  echo "lint: FAIL: the lines above are not formatted as .clang-format says; run" \
    "\`git clang-format --style file $(git rev-parse --short "$base")\` (or \`make format\`" \
    "for uncommitted changes) and commit the result" >&2
  exit 1
fi
echo "lint: format OK"

# 2. Tree walks, in the whole tree (a grep: cheap). Comment lines may name them.
walks=$(git grep -n -E '(filesystem|fs)::(remove_all|recursive_directory_iterator)' -- '*.cpp' '*.h' |
  grep -v -E '^[^:]+:[0-9]+:[[:space:]]*//' || true)
if [[ -n "$walks" ]]; then
  echo "$walks"
  echo "lint: FAIL: the lines above walk a directory tree with std::filesystem, which crashes" \
    "in programs linked against a torch wheel; use fsdp::remove_tree or" \
    "fsdp::regular_files_under ([Note: no std::filesystem tree walks beside a torch wheel]" \
    "in include/fsdp/file_tree.h)" >&2
  exit 1
fi
echo "lint: tree walks OK"

# 3. Function size, with clang-tidy over the compile commands of build-lint/.
cmake -S . -B "$build" -DCMAKE_UNITY_BUILD=OFF -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null || {
  echo "lint: configuring $build for its compile commands failed (above)" >&2
  exit 2
}
# clang-tidy cannot read GCC's precompiled header: drop it from the commands
# (every file includes what it uses, so it parses without).
commands=$(mktemp -d)
trap 'rm -rf "$commands"' EXIT
sed -E 's# -include [^ ]*cmake_pch\.hxx##; s# -Winvalid-pch##' "$build/compile_commands.json" \
  >"$commands/compile_commands.json"

checked_dirs='^(src|tools|bench)/'
if $all; then
  files=$(git ls-files 'src/*.cpp' 'tools/*.cpp' 'bench/*.cpp')
  headers='(src|tools|bench)/'
else
  changed=$(git diff --name-only --diff-filter=d "$base" -- '*.cpp' '*.h' | grep -E "$checked_dirs" || true)
  files=$(grep '\.cpp$' <<<"$changed" || true)
  headers=""
  for header in $(grep '\.h$' <<<"$changed" || true); do
    headers+="${headers:+|}$(sed 's/[.]/[.]/g' <<<"$header")"
    # One file that includes the header, so its inline functions are parsed.
    user=$(git grep -l -E "#include \"([a-z_]+/)*$(basename "$header")\"" -- 'src/*.cpp' 'tools/*.cpp' \
      'bench/*.cpp' | head -1 || true)
    files+=$'\n'"$user"
  done
  headers=${headers:-'^$'}
fi
files=$(grep -v '^$' <<<"$files" | sort -u || true)
# Only files the build compiles (a tool's file the tests compile counts too).
compiled=$(grep -o '"file": "[^"]*"' "$commands/compile_commands.json" | sed 's/"file": "//; s/"$//')
targets=()
for f in $files; do
  if grep -qx "$PWD/$f" <<<"$compiled"; then targets+=("$f"); fi
done
if ((${#targets[@]} == 0)); then
  echo "lint: function size OK (no changed file in src/, tools/ or bench/)"
  exit 0
fi
checks=()
if [[ "${LINT_ALL_CHECKS:-0}" != 1 ]]; then checks=(--checks='-*,readability-function-size'); fi
echo "lint: clang-tidy on ${#targets[@]} files, $jobs at a time"
start=$(date +%s)
status=0
printf '%s\n' "${targets[@]}" |
  xargs -P "$jobs" -n 1 clang-tidy -p "$commands" --quiet "${checks[@]}" --header-filter="$headers" \
    >"$commands/tidy.log" 2>&1 || status=$?
grep -v -E '^[0-9]+ warnings? (and [0-9]+ errors? )?generated\.$' "$commands/tidy.log" || true
if ((status != 0)) || grep -q 'error: ' "$commands/tidy.log"; then
  echo "lint: FAIL: clang-tidy found the errors above (a function over 60 lines: split it" \
    "into named steps)" >&2
  exit 1
fi
echo "lint: function size OK ($((${#targets[@]})) files, $(($(date +%s) - start)) s)"
