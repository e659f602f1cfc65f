#!/usr/bin/env bash
# Compiles (-fsyntax-only) every translation unit of the tree as a CUDA build
# of LibTorch would: FSDP_WITH_NCCL=1 and USE_C10D_NCCL=1 defined, against
# real CUDA and NCCL headers, with tests/gpu/ included.
#
# Why: the lines under FSDP_WITH_NCCL (src/compat.h, src/comm/nccl_group.cpp,
# tools/fsdp-train/training_device.cpp, tests/gpu/, parts of the tests) are
# compiled by no CI leg, since CI has only CPU builds of LibTorch; they are
# compiled only on a GPU machine, where the time is short (minutes) and a
# compile error there wastes it. Run this before a GPU window. It is a
# developer tool, not part of `make test`.
#
#   scripts/cuda-compile-check.sh [REGEX]   check the TUs whose path matches REGEX
#                                           (default: all); exit 1 if any fails
#
# It prints ok or FAIL (with the compiler's output) per TU, those that only a
# CUDA build compiles differently first. On 2 idle cores the whole tree takes
# about 15 minutes; the CUDA-only files alone about a minute:
#   scripts/cuda-compile-check.sh 'gpu|nccl_group|training_device|trainer_parts'
# It holds the lock of scripts/libtorch2-root.sh while it runs, so a
# scripts/test-libtorch2.sh started meanwhile waits for it.
#
# How: in the Debian 13 root of scripts/libtorch2-root.sh (LibTorch 2.6, CPU
# only, but shipping c10/cuda/ and ProcessGroupNCCL.hpp headers) it
# configures a scratch build (/var/tmp/libfsdp-cuda-check in the root) with
# TORCH_CUDA_LIBRARIES set, which turns on the NCCL path of CMakeLists.txt
# (and the tests/gpu/ targets), builds the two precompiled headers (deleted
# after: about 1 GB), then runs each entry of compile_commands.json with
# -fsyntax-only, 2 at a time (JOBS).
# tests/gpu/comm_gpu_check.cpp, which tests/gpu/run_comm_gpu_check.sh builds
# outside CMake, is checked with the library's flags.
#
# The CUDA 12.4 and NCCL 2.22 headers come from Debian 13's non-free and
# contrib (nvidia-cuda-dev, libnccl-dev) and main (libcu++-dev, for
# <nv/target>): downloaded once (about 1 GB of .debs, deleted after) and
# their include/ trees kept in $FSDP_CUDA_HEADERS (default
# /var/lib/libfsdp/cuda-headers, 23 MB), with the host's apt but a private
# sources list and state; /etc/apt is not touched. Plus one header a CPU-only
# LibTorch lacks (c10/cuda/impl/cuda_cmake_macros.h, written here). The GPU machine has
# another torch (2.x wheel) and CUDA, so an error here can be an artifact of
# LibTorch 2.6 or CUDA 12.4; one that passes here may still fail there.
# Needs root (the chroot).
set -euo pipefail
cd "$(dirname "$0")/.."

headers=${FSDP_CUDA_HEADERS:-/var/lib/libfsdp/cuda-headers}
root=${FSDP_LIBTORCH2_ROOT:-/var/lib/libfsdp/trixie-root}
jobs=${JOBS:-2}
filter=${1:-}
packages=(nvidia-cuda-dev libnccl-dev libcu++-dev)
marker=.libfsdp-headers-complete
in_root_include=/opt/libfsdp-cuda-include  # where the root sees $headers/usr/include
build=/var/tmp/libfsdp-cuda-check          # the scratch build, inside the root
start=$(date +%s)

tmp=  # fetch_headers' download directory (1 GB), removed on exit
trap '[[ -z $tmp ]] || rm -rf "$tmp"' EXIT

# shellcheck source=scripts/apt-mirror.sh
source scripts/apt-mirror.sh

log() { echo "cuda-compile-check: $*" >&2; }
die() { log "$*"; exit 1; }

if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || die "needs root (chroot); run it as root"
  exec sudo --preserve-env=FSDP_CUDA_HEADERS,FSDP_LIBTORCH2_ROOT,FSDP_LIBTORCH2_CCACHE,JOBS "$0" "$@"
fi

# --- the headers -----------------------------------------------------------

fetch_headers() {
  local mirror
  mirror=$(debian_mirror) || die "cannot download the CUDA headers without a Debian mirror"
  tmp=$(mktemp -d /var/tmp/libfsdp-cuda-apt.XXXXXX)
  mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial" "$tmp/debs"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror trixie main contrib non-free" \
    > "$tmp/sources.list"
  local apt=(apt-get -q -o Dir::Etc::sourcelist="$tmp/sources.list" -o Dir::Etc::sourceparts=-
             -o Dir::State::Lists="$tmp/lists" -o Dir::Cache="$tmp/cache" -o Debug::NoLocking=1
             -o APT::Sandbox::User=root)
  log "downloading ${packages[*]} from Debian 13 (about 1 GB) to extract their headers"
  "${apt[@]}" update >/dev/null
  (cd "$tmp/debs" && "${apt[@]}" download "${packages[@]}")
  local deb n=0
  rm -rf "$headers.new" && mkdir -p "$headers.new"
  for deb in "$tmp"/debs/*.deb; do
    [[ -e $deb ]] || continue
    dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$headers.new" --wildcards './usr/include/*'
    n=$((n + 1))
  done
  ((n == ${#packages[@]})) || die "downloaded $n of ${#packages[@]} packages (${packages[*]})"
  # A CPU-only LibTorch installs c10/cuda/ without the header a CUDA build
  # generates from c10/cuda/impl/cuda_cmake_macros.h.in; this is what it says.
  mkdir -p "$headers.new/usr/include/c10/cuda/impl"
  cat > "$headers.new/usr/include/c10/cuda/impl/cuda_cmake_macros.h" <<'EOF'
#pragma once
// Written by scripts/cuda-compile-check.sh: what a CUDA (shared) build of
// LibTorch generates from c10/cuda/impl/cuda_cmake_macros.h.in.
#define C10_CUDA_BUILD_SHARED_LIBS
EOF
  printf '%s\n' "${packages[@]}" > "$headers.new/$marker"
  rm -rf "$headers" && mv "$headers.new" "$headers"
  rm -rf "$tmp"
}

if [[ ! -f "$headers/$marker" || "$(cat "$headers/$marker")" != "$(printf '%s\n' "${packages[@]}")" ]]; then
  # fetch_headers replaces $headers: never a directory this script did not make.
  if [[ -e "$headers" && ! -f "$headers/$marker" && -n "$(ls -A "$headers")" ]]; then
    die "$headers exists and is not this script's (no $marker); delete it or set FSDP_CUDA_HEADERS"
  fi
  fetch_headers
fi
for h in cuda_runtime_api.h nccl.h nv/target; do
  [[ -e "$headers/usr/include/$h" ]] || die "$headers/usr/include/$h is missing; delete $headers to fetch again"
done

# --- the root --------------------------------------------------------------

scripts/libtorch2-root.sh  # makes the root if needed
# The root sees the headers as a copy made of hard links (a bind mount would
# be hidden by the bind of the root onto itself that libtorch2-root.sh makes).
rm -rf "${root:?}$in_root_include"
mkdir -p "$(dirname "$root$in_root_include")"
cp -al "$headers/usr/include" "$root$in_root_include" 2>/dev/null || {
  rm -rf "${root:?}$in_root_include"
  cp -a "$headers/usr/include" "$root$in_root_include"
}

# --- the check -------------------------------------------------------------

# The runner, run by python3 in the root: reads the scratch build's
# compile_commands.json, builds the precompiled headers, then runs each TU
# with -fsyntax-only in place of -c and -o.
cat > "$root$build.py" <<'PY'
import concurrent.futures, json, os, re, shlex, subprocess, sys

build, jobs, pattern = os.environ["BUILD"], int(os.environ["JOBS"]), os.environ["FILTER"]
entries = json.load(open(os.path.join(build, "compile_commands.json")))

def target(e):
    m = re.search(r"CMakeFiles/([^/]+)\.dir/", e.get("output") or e["command"])
    return m.group(1) if m else "?"

# comm_gpu_check.cpp is built by tests/gpu/run_comm_gpu_check.sh, not CMake:
# checked with the library's flags (src/ and include/ on the path), no PCH.
lib = next(e for e in entries if e["file"] == "/src/src/comm/nccl_group.cpp")
args = shlex.split(lib["command"])
if "-include" in args:
    i = args.index("-include")
    del args[i:i + 2]
args[-1] = "/src/tests/gpu/comm_gpu_check.cpp"
entries.append({"directory": lib["directory"], "file": args[-1], "arguments": args,
                "output": "CMakeFiles/comm_gpu_check.dir/comm_gpu_check.cpp.o"})

pch = [e for e in entries if e["file"].endswith("cmake_pch.hxx.cxx")]
tus = [e for e in entries if e not in pch and re.search(pattern, e["file"])]

# What only a CUDA build compiles goes first, so that its errors show early.
def cuda_only(e):
    try:
        text = open(e["file"], errors="replace").read()
    except OSError:
        return False
    return "/gpu/" in e["file"] or "FSDP_WITH_NCCL" in text or '#include "compat.h"' in text
tus.sort(key=lambda e: not cuda_only(e))  # stable: compile_commands order otherwise

def run(e, syntax_only):
    args = e.get("arguments") or shlex.split(e["command"])
    if syntax_only:  # drop -c and -o OUT; the source stays last
        kept, skip = [], False
        for a in args:
            if skip:
                skip = False
            elif a == "-o":
                skip = True
            elif a != "-c":
                kept.append(a)
        args = kept[:-1] + ["-fsyntax-only", kept[-1]]
    p = subprocess.run(args, cwd=e["directory"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    return e, p.returncode, p.stdout

def name(e):
    f = e["file"]
    return (f[len("/src/"):] if f.startswith("/src/") else f) + " [" + target(e) + "]"

failed = []
with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
    # The precompiled headers first: each TU of their targets reads one.
    for e, rc, text in pool.map(lambda e: run(e, False), pch if tus else []):
        if rc != 0:
            failed.append(e)
            print("FAIL", name(e), "(precompiled header)\n" + text, flush=True)
    print(f"cuda-compile-check: {len(tus)} translation units, {jobs} at a time", flush=True)
    for e, rc, text in pool.map(lambda e: run(e, True), tus):
        if rc == 0:
            warnings = text.count("warning:")
            print("ok  ", name(e) + (f" ({warnings} warnings)\n" + text if warnings else ""),
                  flush=True)
        else:
            failed.append(e)
            print("FAIL", name(e) + "\n" + text, flush=True)
print(f"cuda-compile-check: {len(tus) + len(pch) - len(failed)} of {len(tus) + len(pch)} "
      f"passed ({len(pch)} precompiled headers)", flush=True)
for e in pch:  # about 1 GB; made again by the next run
    args = shlex.split(e["command"])
    gch = os.path.join(e["directory"], args[args.index("-o") + 1])
    if os.path.exists(gch):
        os.remove(gch)
for e in failed:
    print("  failed:", name(e), flush=True)
sys.exit(1 if failed else 0)
PY

status=0
# shellcheck disable=SC2016  # the bash -c script expands its own variables
# TORCH_CUDA_LIBRARIES non-empty: CMakeLists.txt takes the NCCL path.
# FSDP_NCCL_INCLUDE_DIR as scripts/gpu-check.sh passes it; -isystem keeps the
# CUDA headers' warnings out of the output.
scripts/libtorch2-root.sh env JOBS="$jobs" FILTER="$filter" BUILD="$build" \
  CUDA_INCLUDE="$in_root_include" bash -c '
  set -euo pipefail
  cmake -S /src -B "$BUILD" -DTORCH_CUDA_LIBRARIES=c10_cuda \
    -DFSDP_NCCL_INCLUDE_DIR="$CUDA_INCLUDE" -DCMAKE_CXX_FLAGS="-isystem $CUDA_INCLUDE" \
    > "$BUILD.configure.log" 2>&1 || { tail -30 "$BUILD.configure.log"; exit 1; }
  grep -q "NCCL path: ON" "$BUILD.configure.log" || {
    echo "cuda-compile-check: the configure did not take the NCCL path:"
    grep "libfsdp:" "$BUILD.configure.log"
    exit 1
  }
  python3 "$BUILD.py"
' || status=$?

log "took $(($(date +%s) - start)) s, exit status $status"
exit "$status"
