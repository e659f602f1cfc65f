# Thin wrapper over CMake. `make` builds, `make test` installs what is missing,
# builds and runs the whole CTest suite, `make demo` builds what the demo runs
# (fsdp-run, fsdp-train) and runs the main job.
# `make test-libtorch2` builds and runs the suite again against LibTorch 2.6,
# in a Debian 13 root made once (scripts/libtorch2-root.sh; needs root).
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all build deps configure test test-libtorch2 test-sanitize demo clean format lint

all: build

deps:
	@scripts/install-deps.sh

$(BUILD_DIR)/CMakeCache.txt:
	cmake -S . -B $(BUILD_DIR) $(CMAKE_FLAGS)

configure: $(BUILD_DIR)/CMakeCache.txt

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: deps
	@$(MAKE) --no-print-directory build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 600

test-libtorch2:
	@JOBS=$(JOBS) scripts/test-libtorch2.sh

# The comm, launcher, checkpoint and FSDP unit tests (CTest label sanitize)
# under ASan+UBSan, then under TSan, each in a build of its own
# (build-asan-ubsan/, build-tsan/; CMakePresets.json). Too slow for CI on 2
# cores: run it before submitting a change to threads, collectives or memory.
test-sanitize: deps
	cmake --preset asan-ubsan >/dev/null
	cmake --build --preset asan-ubsan -j $(JOBS)
	ctest --preset asan-ubsan -j $(JOBS)
	cmake --preset tsan >/dev/null
	cmake --build --preset tsan -j $(JOBS)
	ctest --preset tsan -j $(JOBS)

# The demo builds only what scripts/demo.sh runs, not the tests.
demo: deps
	@$(MAKE) --no-print-directory configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target fsdp-run fsdp-train
	@BUILD_DIR=$(BUILD_DIR) scripts/demo.sh

# Formats the C++ lines changed since HEAD (staged or not; new files once
# `git add`ed) in .clang-format's style; the rest of the tree is left as it is.
format:
	git clang-format --style file --force HEAD

# What CI checks before building: the format of the lines changed since the
# merge base with main, and no function over 60 lines (scripts/lint.sh).
lint:
	@JOBS=$(JOBS) scripts/lint.sh

clean:
	rm -rf $(BUILD_DIR)
