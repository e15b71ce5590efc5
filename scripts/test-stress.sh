#!/usr/bin/env bash
# `make test-stress`: runs a ctest suite STRESS_ROUNDS times beside STRESS_BUSY busy loops
# (`while :; do :; done`, started once before the first round), to shake out tests that fail
# only when the machine is loaded, then names every test that failed in any round, with the
# rounds it failed in. Exits non-zero when a test failed (or a round's ctest did not finish).
#
#   scripts/test-stress.sh ctest --test-dir build --output-on-failure -j2
#   STRESS_ROUNDS=5 STRESS_BUSY=4 scripts/test-stress.sh ctest --test-dir build -R Matrix
#
# The arguments are ctest's path and its arguments, passed to scripts/ctest.sh each round, so a
# failed test's output is printed again after each round's summary. Each round's output streams
# to the terminal and is kept in <TEST_LOG_DIR>/stress-round-<n>.log.
# Knobs: STRESS_ROUNDS [2], STRESS_BUSY [2], TEST_LOG_DIR [<repo>/build/test-logs].
# The busy loops are killed on every exit: the end, a failure, Ctrl-C, SIGTERM, SIGHUP; a
# watchdog kills them too should this script itself be killed with SIGKILL.
set -uo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/test-lib.sh
. "$repo/scripts/test-lib.sh"

rounds=${STRESS_ROUNDS:-2}
busy=${STRESS_BUSY:-2}
if ! [[ $rounds =~ ^[0-9]+$ && $busy =~ ^[0-9]+$ ]] || [ "$rounds" -lt 1 ]; then
  echo "test-stress: STRESS_ROUNDS must be 1 or more and STRESS_BUSY 0 or more" >&2
  exit 2
fi
if [ $# -lt 1 ]; then
  echo "usage: test-stress.sh CTEST [CTEST-ARGUMENTS...]" >&2
  exit 2
fi
log_dir=${TEST_LOG_DIR:-$repo/build/test-logs}
if ! mkdir -p "$log_dir" 2>/dev/null || [ ! -w "$log_dir" ]; then
  echo "test-stress: cannot write to $log_dir, keeping the logs in a temporary directory" >&2
  log_dir=$(mktemp -d "${TMPDIR:-/tmp}/chorus-test-logs.XXXXXX")
fi

busy_pids=()
watchdog=""
stop_busy() {
  # Background jobs of a script ignore SIGINT, so the loops need an explicit SIGTERM.
  if [ -n "$watchdog" ]; then
    kill "$watchdog" 2>/dev/null
    wait "$watchdog" 2>/dev/null
    watchdog=""
  fi
  if [ "${#busy_pids[@]}" -gt 0 ]; then
    kill "${busy_pids[@]}" 2>/dev/null
    wait "${busy_pids[@]}" 2>/dev/null
    echo "== [$(date +%T)] test-stress: stopped ${#busy_pids[@]} busy loop(s)"
    busy_pids=()
  fi
}
trap stop_busy EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

for ((i = 0; i < busy; i++)); do
  (while :; do :; done) &
  busy_pids+=($!)
done
if [ "$busy" -gt 0 ]; then
  # Should this script die without running its traps, the watchdog still ends the loops.
  (
    while kill -0 $$ 2>/dev/null; do sleep 1; done
    kill "${busy_pids[@]}" 2>/dev/null
  ) &
  watchdog=$!
fi
echo "== [$(date +%T)] test-stress: $rounds round(s) beside $busy busy loop(s)" \
  "(pids ${busy_pids[*]:-none})"

declare -A failed_in=()  # test name -> " 1 3"
order=()                 # test names in the order they first failed
summaries=()

for ((round = 1; round <= rounds; round++)); do
  log=$log_dir/stress-round-$round.log
  echo "== [$(date +%T)] test-stress: round $round of $rounds (log: ${log#"$repo"/})"
  start=$(date +%s)
  bash "$repo/scripts/ctest.sh" "$@" 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  secs=$(($(date +%s) - start))

  names=()
  if counts=$(ctest_counts "$log"); then
    read -r passed failed _ <<<"$counts"
    mapfile -t names < <(ctest_failed_names "$log")
    if [ "${#names[@]}" -lt "$failed" ]; then
      names+=("[failed tests not named in the log]")
    fi
    if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then
      names+=("[ctest exit $status after all tests passed]")
    fi
    summaries+=("round $round: $passed passed, $failed failed, $secs s")
  else
    if [ "$status" -ne 0 ]; then
      names+=("[ctest exit $status without a summary: it did not finish]")
    fi
    summaries+=("round $round: no ctest summary (exit $status), $secs s")
  fi
  for name in "${names[@]}"; do
    if [ -z "${failed_in[$name]+set}" ]; then
      order+=("$name")
      failed_in[$name]=""
    fi
    failed_in[$name]+=" $round"
  done
done

stop_busy
echo
echo "== [$(date +%T)] test-stress: summary of $rounds round(s) beside $busy busy loop(s)"
printf '%s\n' "${summaries[@]}"
if [ "${#order[@]}" -eq 0 ]; then
  echo "test-stress: no test failed in any of $rounds round(s)"
  exit 0
fi
echo "failed:"
for name in "${order[@]}"; do
  in=${failed_in[$name]# }
  if [[ $in == *" "* ]]; then
    echo "  $name (rounds ${in// /, })"
  else
    echo "  $name (round $in)"
  fi
done
echo "test-stress: ${#order[@]} test(s) failed in at least one of $rounds round(s)"
exit 1
