# Makefile: one-command set-up, build and test for chorus on Debian 12.
#
#   make demo     install missing Debian packages, build, run `chorus demo`
#   make test     install, build, run every test: the normal build's tests,
#                 then ASan+UBSan and TSan builds, plus the consumer projects (find_package of
#                 the static, shared and MPI libraries, pkg-config, add_subdirectory, the
#                 installed demo's plots) and a bounded libFuzzer run (clang) over the wire parsers.
#                 Every suite runs even when one before it failed (scripts/test-all.sh); then one
#                 summary: per suite the tests passed and failed and its seconds, the failed
#                 tests' names, and as the last line the totals, `N passed, N failed`. Each
#                 suite's output is also kept in build/test-logs/<suite>.log
#   make test-stress  the normal build's tests STRESS_ROUNDS times (default 2) beside STRESS_BUSY
#                 busy loops (default 2), then every test that failed in any round, with its
#                 rounds (scripts/test-stress.sh; logs in build/test-logs/stress-round-<n>.log)
#   make build-types  configure and build the libraries, the CLI and the tests that once warned
#                 in each of BUILD_TYPES (default Debug Release MinSizeRel) with g++ and in
#                 each of BUILD_TYPES_CLANG (default RelWithDebInfo) with clang++, under
#                 build-types/, warnings as errors, so no optimisation level's or compiler's
#                 warnings go unseen (g++ RelWithDebInfo is build/ itself);
#                 BUILD_TYPES_TARGETS=all builds everything, tests and benchmarks included
#   make bench    build and run the Google Benchmark micro-benchmarks
#   make soak     collectives under CPU contention for SOAK_SECONDS (default 600) beside SOAK_BUSY
#                 busy loops (default 4): every result checked, the slowest call per size shown
#   make torch    install torch (Debian's python3-torch, libtorch-dev), build chorus.torch, the
#                 torch.distributed backend, and run its tests
#   make plot     run the demo and render its figures into build/demo/ with matplotlib
#   make fuzz     build the libFuzzer target with clang and run it for FUZZ_SECONDS
#   make asan | tsan | consumer | format | format-check | clean
#
# Every build here configures with -DCHORUS_WERROR=ON (warnings are errors). A plain `cmake`
# configure, or chorus added to another project, keeps warnings as warnings.
#
# Installing packages needs root (scripts/install-deps.sh says what is missing otherwise).
# CMake does the real work; this file only strings the steps together, so every step can also
# be run by hand (see the recipes).
#
# Knobs (override on the command line, e.g. `make test CTEST_JOBS=1`):
#   BUILD_TYPE   CMake build type of build/ (default RelWithDebInfo: optimised, with symbols)
#   DEBUG_INFO   debug-information flag of that build (default -g1, line tables; -g for full)
#   JOBS         compile jobs (default: nproc)
#   CTEST_JOBS   tests run at once (default 2; ranks are threads, so more mostly oversubscribes)
#   CTEST_ARGS   extra ctest arguments for every suite, e.g. CTEST_ARGS="-R Matrix" or "-L cli"
#   PYTHON       interpreter with matplotlib, for `make plot` (default /usr/bin/python3; the
#                pyenv python3 that may come first on PATH lacks matplotlib)
#   DEMO_ARGS    extra arguments for `chorus demo`, e.g. DEMO_ARGS="--ranks 8 --plot out"
#   BENCH_ARGS   extra arguments for each benchmark binary
#   TSAN_SETARCH auto | yes | no: run TSan tests with ASLR off (see below)
#   FUZZ_SECONDS how long `make fuzz` (and so `make test`) fuzzes (default 30)
#   BUILD_TYPES  the build types `make build-types` checks (default Release, the -O3 build whose
#                warnings once differed; `make build-types BUILD_TYPES="Debug Release MinSizeRel"`
#                checks the others too)
#   TEST_SUITES  the suites `make test` runs, in order (default test-build asan tsan
#                fuzz shm-check), e.g. `make test TEST_SUITES="test-build shm-check"`
#   STRESS_ROUNDS, STRESS_BUSY  rounds of `make test-stress` (default 2) and the busy loops
#                beside them (default 2)
#
# Environment seen by the sanitizer test runs:
#   CHORUS_TEST_SCALE=small  tells the tests to shrink their largest element counts, since
#                            sanitized code runs 2-15x slower; correctness coverage (ranks,
#                            uneven splits, multi-segment paths) is kept, only sizes shrink.

BUILD_TYPE ?= RelWithDebInfo
# Line tables only (file and line in every backtrace): a quarter less build time than -g.
DEBUG_INFO ?= -g1
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
CTEST_JOBS ?= 2
PYTHON     ?= /usr/bin/python3
DEMO_ARGS  ?=
BENCH_ARGS ?=
TSAN_SETARCH ?= auto
FUZZ_SECONDS ?= 30
SOAK_SECONDS ?= 600
SOAK_BUSY    ?= 4
BUILD_TYPES ?= Debug Release MinSizeRel
BUILD_TYPES_CLANG ?= RelWithDebInfo
# build-types is left out for now: the whole of `make test` takes 28 minutes on a clean clone here
# (it must stay under 30, with room to grow), and it is the one suite that runs no test. Run it by hand, or name it here.
TEST_SUITES ?= test-build asan tsan fuzz shm-check
STRESS_ROUNDS ?= 2
STRESS_BUSY   ?= 2

BUILD_DIR := build
ASAN_DIR  := build-asan
TSAN_DIR  := build-tsan
TYPES_DIR := build-types

CMAKE ?= cmake
CTEST ?= ctest
CTEST_ARGS ?=
CTEST_FLAGS = --output-on-failure -j$(CTEST_JOBS) $(CTEST_ARGS)

# Sanitizer builds skip the benchmarks (they measure nothing useful when instrumented), the
# examples (the normal build runs them) and the MPI transport (its tests and the CLI's MPI ranks
# are unsanitized only: Open MPI is not built with the sanitizers), compile at -O1 -g1
# (CMakeLists.txt), run a slice of the collective matrices (tests/CMakeLists.txt) and make the
# first error fatal so that ctest reports it as a failure rather than a log line.
SANITIZER_CMAKE_FLAGS = -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCHORUS_BUILD_BENCH=OFF \
  -DCHORUS_BUILD_EXAMPLES=OFF -DCHORUS_WITH_MPI=OFF -DCHORUS_WERROR=ON
ASAN_ENV = CHORUS_TEST_SCALE=small \
  ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
TSAN_ENV = CHORUS_TEST_SCALE=small TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1

# Each recipe line runs after the previous target finished; the parallelism is inside CMake.
.NOTPARALLEL:
.PHONY: all deps configure build build-types demo plot test test-build test-stress asan tsan fuzz \
        shm-check consumer bench soak torch format format-check clean

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	$(CMAKE) -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DCHORUS_DEBUG_INFO=$(DEBUG_INFO) \
	  -DCHORUS_WERROR=ON

build: configure
	@echo "== [$$(date +%T)] build $(BUILD_DIR)"
	$(CMAKE) --build $(BUILD_DIR) -j$(JOBS)

demo: build
	./$(BUILD_DIR)/chorus demo $(DEMO_ARGS)

plot: build
	mkdir -p $(BUILD_DIR)/demo
	./$(BUILD_DIR)/chorus demo $(DEMO_ARGS) --json $(BUILD_DIR)/demo/demo.json
	$(PYTHON) scripts/plot_demo.py $(BUILD_DIR)/demo/demo.json $(BUILD_DIR)/demo

# The normal build's tests include the consumer projects (ctest label "consumer").
test-build: build
	@echo "== [$$(date +%T)] test $(BUILD_DIR)"
	bash scripts/ctest.sh $(CTEST) --test-dir $(BUILD_DIR) $(CTEST_FLAGS)

# Every suite of TEST_SUITES runs as `make <suite>` (so each also runs alone), even after one
# failed; scripts/test-all.sh streams and logs each suite's output, and closes with the summary
# whose last line, `N passed, N failed`, CI reads beside the exit status (non-zero when a test
# failed or a suite could not run, e.g. its build failed; on such a failure make itself adds
# its "make: *** [...test] Error 1" on stderr, as it did before). shm-check, the final check
# that no test left a shared-memory segment behind, counts as one test.
test:
	@MAKE="$(MAKE)" TEST_LOG_DIR=$(BUILD_DIR)/test-logs bash scripts/test-all.sh $(TEST_SUITES)

# The normal build's whole suite (consumers included), STRESS_ROUNDS times beside STRESS_BUSY
# busy loops, for the tests that fail only on a loaded machine; the loops are killed at the
# end, on a failure and on Ctrl-C.
test-stress: build
	@echo "== [$$(date +%T)] test-stress $(BUILD_DIR)"
	@STRESS_ROUNDS=$(STRESS_ROUNDS) STRESS_BUSY=$(STRESS_BUSY) TEST_LOG_DIR=$(BUILD_DIR)/test-logs \
	  bash scripts/test-stress.sh $(CTEST) --test-dir $(BUILD_DIR) $(CTEST_FLAGS)

shm-check:
	@left=$$(ls /dev/shm 2>/dev/null | grep "^chorus-$$(id -u)-" || true); \
	if [ -n "$$left" ]; then echo "FAIL: left in /dev/shm: $$left"; exit 1; fi

# Each build type optimises differently, and GCC's flow-based warnings (-Wrestrict,
# -Wmaybe-uninitialized, -Wstringop-*) come and go with the optimisation level: Release (-O3)
# once failed on a -Wrestrict false positive that RelWithDebInfo (-O2) never showed. Only what
# can warn differently is built: the libraries, the CLI and the tests that warned then (the other
# tests build in build/); no benchmarks or examples, and the tests are not run, so discovery
# waits for a test run (PRE_TEST) instead of running each binary after its link.
BUILD_TYPES_TARGETS ?= chorus chorus_shared chorus_cli launch_test store_auth_test traffic_test
build-types: deps
	@set -e; \
	for build in $(addprefix g++:,$(BUILD_TYPES)) $(addprefix clang++:,$(BUILD_TYPES_CLANG)); do \
	  cxx=$${build%%:*}; type=$${build#*:}; \
	  dir=$(TYPES_DIR)/$$type; [ "$$cxx" = g++ ] || dir=$(TYPES_DIR)/clang-$$type; \
	  echo "== [$$(date +%T)] build-types: $$type with $$cxx in $$dir"; \
	  mkdir -p $$dir; \
	  $(CMAKE) -S . -B $$dir -DCMAKE_BUILD_TYPE=$$type -DCMAKE_CXX_COMPILER=$$cxx \
	    -DCHORUS_WERROR=ON -DCHORUS_BUILD_BENCH=$(if $(filter all,$(BUILD_TYPES_TARGETS)),ON,OFF) \
	    -DCHORUS_BUILD_EXAMPLES=$(if $(filter all,$(BUILD_TYPES_TARGETS)),ON,OFF) \
	    -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST > $$dir/configure.log 2>&1 \
	    || { cat $$dir/configure.log; exit 1; }; \
	  targets="$(BUILD_TYPES_TARGETS)"; \
	  if [ "$$targets" != all ] && grep -q '^CHORUS_WITH_MPI:BOOL=ON' $$dir/CMakeCache.txt; then \
	    targets="$$targets chorus_mpi chorus_mpi_shared"; \
	  fi; \
	  $(CMAKE) --build $$dir -j$(JOBS) --target $$targets; \
	done; \
	echo "== [$$(date +%T)] build-types: g++ $(BUILD_TYPES), clang++ $(BUILD_TYPES_CLANG) built without warnings"

asan: deps
	@echo "== [$$(date +%T)] asan: build and test $(ASAN_DIR)"
	$(CMAKE) -S . -B $(ASAN_DIR) $(SANITIZER_CMAKE_FLAGS) -DCHORUS_SANITIZE=address
	$(CMAKE) --build $(ASAN_DIR) -j$(JOBS)
	$(ASAN_ENV) bash scripts/ctest.sh $(CTEST) --test-dir $(ASAN_DIR) $(CTEST_FLAGS)

# Some kernels place mappings where GCC's TSan runtime does not expect them (vm.mmap_rnd_bits
# above 28), and every instrumented binary dies with "unexpected memory mapping". A tiny probe
# finds out; if it fails, the build (gtest_discover_tests runs the test binaries) and the tests
# run under `setarch -R`, i.e. with ASLR off for cmake, ctest and their children.
# TSAN_SETARCH=yes/no skips the probe.
tsan: deps
	@echo "== [$$(date +%T)] tsan: build and test $(TSAN_DIR)"
	@set -e; mkdir -p $(TSAN_DIR); runner=""; \
	case "$(TSAN_SETARCH)" in \
	  yes) runner="setarch $$(uname -m) -R" ;; \
	  no) ;; \
	  *) printf '%s\n' '#include <thread>' \
	       'int main() { int x = 0; std::thread t([&] { x = 1; }); t.join(); return x - 1; }' \
	       | $(CXX) -x c++ -std=c++20 -fsanitize=thread -pthread -o $(TSAN_DIR)/tsan-probe -; \
	     if ! $(TSAN_DIR)/tsan-probe >$(TSAN_DIR)/tsan-probe.log 2>&1; then \
	       echo "TSan probe failed: $$(head -c 300 $(TSAN_DIR)/tsan-probe.log)"; \
	       echo "running the TSan build and tests under setarch -R"; \
	       runner="setarch $$(uname -m) -R"; \
	     fi ;; \
	esac; \
	set -x; \
	$$runner $(CMAKE) -S . -B $(TSAN_DIR) $(SANITIZER_CMAKE_FLAGS) -DCHORUS_SANITIZE=thread; \
	$$runner $(CMAKE) --build $(TSAN_DIR) -j$(JOBS); \
	$(TSAN_ENV) $$runner bash scripts/ctest.sh $(CTEST) --test-dir $(TSAN_DIR) $(CTEST_FLAGS)

# The handshake, frame and store-request parsers under libFuzzer for a bounded time; a crash
# fails the target and leaves its input in build-fuzz/artifacts/.
fuzz: deps
	@echo "== [$$(date +%T)] fuzz: $(FUZZ_SECONDS) s"
	FUZZ_SECONDS=$(FUZZ_SECONDS) bash scripts/fuzz.sh

# Only the packaging tests: install build/ into build/_install, then build and run the
# consumers in tests/consumer/ (find_package static / shared / mpi / QUIET, pkg-config, the
# installed demo's plots, add_subdirectory).
consumer: build
	bash scripts/ctest.sh $(CTEST) --test-dir $(BUILD_DIR) $(CTEST_FLAGS) -L consumer

# chorus.torch, the torch.distributed backend: installs Debian's python3-torch and libtorch-dev
# (about 900 MB, which `make deps` leaves out), builds the extension chorus._torch into
# $(BUILD_DIR)/python and runs its tests (python/tests/test_torch.py). Once torch is installed
# the normal build makes the extension too, and `make test` runs these tests with the others.
torch:
	@bash scripts/install-deps.sh python3-torch libtorch-dev
	$(CMAKE) -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DCHORUS_DEBUG_INFO=$(DEBUG_INFO) \
	  -DCHORUS_WERROR=ON -DCHORUS_BUILD_TORCH=ON
	$(CMAKE) --build $(BUILD_DIR) -j$(JOBS)
	cd $(BUILD_DIR) && PYTHONPATH=$$PWD/python CHORUS_CLI=$$PWD/chorus \
	  $(PYTHON) -m pytest -q -p no:cacheprovider $(CURDIR)/python/tests/test_torch.py

soak: build
	./$(BUILD_DIR)/tests/chorus_soak --seconds $(SOAK_SECONDS) --busy $(SOAK_BUSY)

bench: build
	@set -e; found=0; \
	for b in $(BUILD_DIR)/bench/*_bench; do \
	  [ -x "$$b" ] || continue; found=1; \
	  echo "== $$b"; "$$b" $(BENCH_ARGS); \
	done; \
	[ $$found -eq 1 ] || echo "no benchmarks built in $(BUILD_DIR)/bench"

FORMAT_DIRS := src include tools tests bench examples
format-files = $(shell find $(wildcard $(FORMAT_DIRS)) -type f \
                 \( -name '*.h' -o -name '*.hpp' -o -name '*.cc' -o -name '*.cpp' \) 2>/dev/null)

format:
	@bash scripts/install-deps.sh clang-format
	clang-format -i $(format-files)

format-check:
	@bash scripts/install-deps.sh clang-format
	clang-format --dry-run --Werror $(format-files)

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR) $(TSAN_DIR) $(TYPES_DIR)
