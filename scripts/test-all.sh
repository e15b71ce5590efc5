#!/usr/bin/env bash
# `make test`: runs every suite with `make <suite>`, each one whatever became of the ones before,
# and closes with one summary: per suite the tests passed and failed and the seconds it took, the
# names of the failed tests, and as the very last line the totals, `N passed, N failed`.
#
#   scripts/test-all.sh                        # test-build asan tsan fuzz shm-check
#   scripts/test-all.sh test-build shm-check   # only these suites, in this order
#
# Each suite's output streams to the terminal as it runs and is kept in <TEST_LOG_DIR>/<suite>.log.
# Suites that run ctest (test-build, asan, tsan, consumer) count the tests of ctest's closing line
# "N% tests passed, F tests failed out of T" and name those listed under "The following tests
# FAILED:"; a ctest suite that fails before ctest prints that line (its build failed) counts as
# one failed test, "<suite>: build failed". Any other suite (build-types, fuzz, shm-check)
# counts as one test, passed when `make <suite>` succeeds. The durations are only reported.
# Exits 0 when nothing failed, 1 when something did, 130 when interrupted (the suites not yet
# run count as failed).
#
# Knobs: MAKE [make], TEST_LOG_DIR [<repo>/build/test-logs], TEST_CTEST_SUITES [test-build asan
# tsan consumer test-stress]: the suites whose output is read as ctest's. Variables given to the
# calling make (`make test CTEST_JOBS=1`) reach every `make <suite>` through MAKEFLAGS.
set -uo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/test-lib.sh
. "$repo/scripts/test-lib.sh"
cd "$repo" || exit 2

read -ra make_cmd <<<"${MAKE:-make}"
make_cmd+=(--no-print-directory)
if [ $# -gt 0 ]; then
  suites=("$@")
else
  suites=(test-build asan tsan fuzz shm-check)
fi
ctest_suites=" ${TEST_CTEST_SUITES:-test-build asan tsan consumer test-stress} "
log_dir=${TEST_LOG_DIR:-$repo/build/test-logs}
if ! mkdir -p "$log_dir" 2>/dev/null || [ ! -w "$log_dir" ]; then
  echo "test-all: cannot write to $log_dir, keeping the logs in a temporary directory" >&2
  log_dir=$(mktemp -d "${TMPDIR:-/tmp}/chorus-test-logs.XXXXXX")
fi

# Ctrl-C reaches the running suite too (one process group); finish its summary, run no more.
interrupted=0
trap 'interrupted=1' INT TERM HUP

rows=()        # "suite passed failed seconds"
failures=()    # "suite: test name"
total_passed=0
total_failed=0

# record SUITE PASSED FAILED SECONDS [FAILURE...]
record() {
  local suite=$1 passed=$2 failed=$3 secs=$4
  shift 4
  rows+=("$suite $passed $failed $secs")
  total_passed=$((total_passed + passed))
  total_failed=$((total_failed + failed))
  local f
  for f in "$@"; do failures+=("$suite: $f"); done
}

for suite in "${suites[@]}"; do
  if [ "$interrupted" -ne 0 ]; then
    record "$suite" 0 1 0 "not run (interrupted)"
    continue
  fi
  log=$log_dir/$suite.log
  echo "== [$(date +%T)] test-all: make $suite (log: ${log#"$repo"/})"
  start=$(date +%s)
  "${make_cmd[@]}" "$suite" 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  secs=$(($(date +%s) - start))

  if [[ $ctest_suites != *" $suite "* ]]; then
    if [ "$status" -eq 0 ]; then
      record "$suite" 1 0 "$secs"
    elif [ "$interrupted" -ne 0 ]; then
      record "$suite" 0 1 "$secs" "interrupted"
    else
      record "$suite" 0 1 "$secs" "failed (make exit $status)"
    fi
  elif counts=$(ctest_counts "$log"); then
    read -r passed failed _ <<<"$counts"
    mapfile -t names < <(ctest_failed_names "$log")
    if [ "${#names[@]}" -lt "$failed" ]; then
      names+=("$((failed - ${#names[@]})) failed test(s) not named in the log")
    fi
    if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then
      # ctest said all passed but the suite failed anyway (ctest's own error, a step after it).
      failed=1
      names+=("make exit $status after all tests passed")
    fi
    record "$suite" "$passed" "$failed" "$secs" "${names[@]}"
  elif [ "$status" -eq 0 ]; then
    record "$suite" 0 0 "$secs"  # ctest ran no test (e.g. a CTEST_ARGS filter matched none)
  elif [ "$interrupted" -ne 0 ]; then
    record "$suite" 0 1 "$secs" "interrupted"
  else
    record "$suite" 0 1 "$secs" "build failed (make exit $status before ctest's summary)"
  fi
done

echo
echo "== [$(date +%T)] test-all: summary (logs in ${log_dir#"$repo"/}/)"
printf '%-14s %8s %8s %9s\n' suite passed failed seconds
for row in "${rows[@]}"; do
  read -r suite passed failed secs <<<"$row"
  printf '%-14s %8d %8d %9d\n' "$suite" "$passed" "$failed" "$secs"
done
if [ "${#failures[@]}" -gt 0 ]; then
  echo "failed:"
  printf '  %s\n' "${failures[@]}"
fi
echo "$total_passed passed, $total_failed failed"

if [ "$interrupted" -ne 0 ]; then
  exit 130
fi
[ "$total_failed" -eq 0 ]
