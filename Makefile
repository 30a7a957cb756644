# Thin wrapper over CMake. `make` installs missing packages, configures and builds;
# `make test` runs every test CTest knows; `make run` is the main job.
BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
CTEST_ARGS ?=

.PHONY: all deps configure build test test-under-load test-sanitize run bench clean

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

# Tests run two at a time, each CPU test with an OpenMP team as wide as the machine: waiting
# threads sleep (OMP_WAIT_POLICY=passive) instead of spinning on the other test's core.
test: build
	cd $(BUILD_DIR) && OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-passive} ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)

# The command-line, serving and ONNX conformance tests with two busy loops beside them (CI runs it too);
# LOAD_TESTS=. runs every test that way.
LOAD_TESTS ?= ^cli:|^executor:serving:|^importer: ONNX.s backend test cases
test-under-load: build
	@bash scripts/test-under-load.sh $(BUILD_DIR) '$(LOAD_TESTS)'

# The CPU tests again under ASan and UBSan, in their own build folder (CI runs it too).
test-sanitize: deps
	@bash scripts/test-sanitizers.sh $(BUILD_DIR)-asan

# The main job needs only the hios binary: the tests are built by `make test`. Where no GPU is
# visible the job runs on CPU ranks, so its binary is built without the CUDA backend, in a
# folder of its own ($(BUILD_DIR)-cpu): 187 s on 2 cores against 342 s with it.
HAS_GPU := $(shell nvidia-smi -L 2>/dev/null | grep -q '^GPU' && echo yes)
RUN_DIR := $(if $(HAS_GPU),$(BUILD_DIR),$(BUILD_DIR)-cpu)
RUN_FLAGS := $(if $(HAS_GPU),,-DHIOS_CUDA=OFF)
run: deps
	@cmake -S . -B $(RUN_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(RUN_FLAGS) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(RUN_DIR) -j $(JOBS) --target hios
	@bash scripts/main-job.sh $(RUN_DIR)

clean:
	rm -rf $(BUILD_DIR) $(BUILD_DIR)-asan $(BUILD_DIR)-cpu
