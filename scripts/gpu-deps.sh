#!/usr/bin/env bash
# Copies the header-only dependencies and googletest's sources from this
# Debian machine into .gpudeps/, which the GPU machine (no package registry)
# receives through the device tool's `carry` and uses via -DFSDP_DEPS_DIR;
# and Debian's Gloo headers into .gpudeps/gloo-include/, for
# -DFSDP_GLOO_INCLUDE_DIR: torch wheels ship no Gloo headers (docs/gpu.md).
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.gpudeps/' .git/info/exclude 2>/dev/null || echo '/.gpudeps/' >> .git/info/exclude
rm -rf .gpudeps && mkdir -p .gpudeps/include
cp -r /usr/include/CLI /usr/include/fmt /usr/include/xxhash.h /usr/include/xxh3.h /usr/include/rapidjson .gpudeps/include/
cp -r /usr/src/googletest .gpudeps/googletest
mkdir -p .gpudeps/gloo-include && cp -r /usr/include/gloo .gpudeps/gloo-include/
du -sh .gpudeps
