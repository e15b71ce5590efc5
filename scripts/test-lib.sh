# shellcheck shell=bash
# Functions shared by scripts/test-all.sh (`make test`) and scripts/test-stress.sh
# (`make test-stress`) to read a ctest run's log, as printed by scripts/ctest.sh. Source it; it
# runs nothing by itself.
#
#   ctest_counts LOG        prints "passed failed total" from ctest's closing line
#                           "N% tests passed, F tests failed out of T"; returns 1 when the log
#                           holds no such line (ctest did not run, or did not finish)
#   ctest_failed_names LOG  prints the names ctest lists under "The following tests FAILED:",
#                           one a line, without the number, the status and the labels
#
# Both read only the ctest run itself: the log up to the line with which scripts/ctest.sh starts
# printing the failed tests' output again, so that nothing a test printed is taken for ctest's
# own lines. A test's output may itself hold a ctest summary (a nested ctest run, printed by
# --output-on-failure before the outer summary), so the last summary counts, and the FAILED list
# that follows it.

# The line scripts/ctest.sh prints before it repeats the failed tests' output.
CTEST_REPRINT_MARKER='== the output of the failed tests, again'

ctest_counts() {
  awk -v marker="$CTEST_REPRINT_MARKER" '
    $0 == marker && line != "" { exit }
    /^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+/ { line = $0 }
    END {
      if (line == "") exit 1
      n = split(line, w, " ")
      failed = w[4] + 0; total = w[9] + 0
      print total - failed, failed, total
    }' "$1"
}

ctest_failed_names() {
  awk -v marker="$CTEST_REPRINT_MARKER" '
    $0 == marker && seen { exit }
    /^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+/ {
      seen = 1; n = 0; listing = 0; next
    }
    /^The following tests FAILED:/ { listing = 1; n = 0; next }
    listing && /^[[:space:]]*[0-9]+ - / {
      name = $0
      sub(/^[[:space:]]*[0-9]+ - /, "", name)
      # "<name> (Failed)", "(Timeout)", "(Not Run)", ..., labels possibly after the status.
      if (match(name, / \([^()]*\)([[:space:]][^()]*)?$/)) name = substr(name, 1, RSTART - 1)
      names[++n] = name
      next
    }
    listing { listing = 0 }
    END { for (i = 1; i <= n; i++) print names[i] }' "$1"
}
