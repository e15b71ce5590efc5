#!/usr/bin/env bash
# Builds the libFuzzer target tests/fuzz/fuzz_wire.cpp with clang in build-fuzz/ and runs it for
# FUZZ_SECONDS (default 60) from a seed corpus of valid messages that the target writes itself.
# Exits non-zero when the fuzzer finds a crash, a sanitizer report, a leak or a slow input; the
# input that did it is left in build-fuzz/artifacts/ and the log says how to replay it:
#
#   scripts/fuzz.sh                               # 60 seconds
#   FUZZ_SECONDS=600 scripts/fuzz.sh              # longer
#   scripts/fuzz.sh build-fuzz/artifacts/crash-<hash>  # replay inputs (no fuzzing)
#
# Knobs: FUZZ_SECONDS, FUZZ_BUILD_DIR (default build-fuzz), JOBS (compile jobs, default 2).
# Needs clang and libclang-rt-14-dev (scripts/install-deps.sh). Only the fuzz target is built:
# tests, tools, benchmarks and examples are switched off in this build directory.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
seconds=${FUZZ_SECONDS:-60}
jobs=${JOBS:-2}

for tool in clang clang++ cmake; do
  if ! command -v "$tool" > /dev/null; then
    echo "fuzz.sh: $tool not found (apt-get install clang libclang-rt-14-dev cmake)" >&2
    exit 2
  fi
done

mkdir -p "$build"
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCHORUS_FUZZ=ON -DCHORUS_WERROR=ON -DCHORUS_BUILD_TESTS=OFF -DCHORUS_BUILD_TOOLS=OFF \
  -DCHORUS_BUILD_BENCH=OFF -DCHORUS_BUILD_EXAMPLES=OFF > "$build/configure.log" 2>&1 || {
  cat "$build/configure.log" >&2
  exit 1
}
cmake --build "$build" -j "$jobs" --target fuzz_wire
target=$build/tests/fuzz/fuzz_wire

if [ $# -gt 0 ]; then
  exec "$target" "$@"  # replay the given inputs
fi

corpus=$(mktemp -d "${TMPDIR:-/tmp}/chorus-fuzz-corpus.XXXXXX")
trap 'rm -rf "$corpus"' EXIT
CHORUS_FUZZ_SEEDS=$corpus "$target"
echo "fuzz.sh: $(ls "$corpus" | wc -l) seeds; fuzzing for ${seconds} s"
mkdir -p "$build/artifacts"
# -timeout: one input taking over 10 s is a hang; -rss_limit_mb bounds what a length field can
# make the parsers allocate.
"$target" "$corpus" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$build/artifacts/" -print_final_stats=1
