#!/usr/bin/env bash
# Runs ctest (its path first, then its arguments) and, when a test fails, prints the output of
# every failed test again at the very end, after ctest's summary: a CI that keeps only the tail
# of a long log still shows why a test failed, not only which.
set -uo pipefail
ctest_bin=$1
shift
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$ctest_bin" "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
if [ "$status" -ne 0 ]; then
  # scripts/test-lib.sh (make test, make test-stress) reads ctest's counts and failed names only
  # up to this line (CTEST_REPRINT_MARKER there): change both together.
  echo "== the output of the failed tests, again"
  # With --output-on-failure ctest prints a failed test's output between its result line and
  # the next test's "Start" or result line.
  awk '/\*\*\*(Failed|Exception|Timeout)/ { keep = 1; print; next }
       keep && /^ *(Start +[0-9]+:|[0-9]+\/[0-9]+ Test +#)/ { keep = 0 }
       keep { print }' "$log" | tail -c 60000
fi
exit "$status"
