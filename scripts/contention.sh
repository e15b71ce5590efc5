#!/usr/bin/env bash
# contention.sh: the contention reproductions of issue 10, run again and again beside busy loops.
#
#   scripts/contention.sh [RUNS] [BUSY]        # default 100 runs, 4 busy loops
#
# Each run is one of the three commands that used to miss their deadline under load (a 64 MiB
# all-gather and reduce-scatter on 4 shm ranks, a 32 MiB all-reduce on 3), with a 15 s deadline
# and every element checked. Prints one line per run (exit status and seconds) and a summary;
# exits 1 if any run failed. More load (a build, another test suite) may run beside it.
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-100}
busy=${2:-4}
chorus=${CHORUS:-./build/chorus}
[ -x "$chorus" ] || { echo "contention.sh: $chorus not built (make build)" >&2; exit 2; }

pids=()
for _ in $(seq 1 "$busy"); do (while :; do :; done) & pids+=($!); done
trap 'kill "${pids[@]}" 2>/dev/null' EXIT

commands=(
  "--transport shm -n 4 --op allgather --sizes 64M -c --iters 20 --timeout-ms 15000"
  "--transport shm -n 4 --op reducescatter --sizes 64M -c --iters 20 --timeout-ms 15000"
  "--transport shm -n 3 --op allreduce --sizes 32M -c --iters 20 --timeout-ms 15000"
)
failed=0
slowest=0
for i in $(seq 1 "$runs"); do
  args=${commands[$(( (i - 1) % ${#commands[@]} ))]}
  start=$(date +%s.%N)
  # shellcheck disable=SC2086
  out=$("$chorus" bench $args 2>&1)
  status=$?
  seconds=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  # The out-of-place time column (us) of the size row, in ms.
  median=$(echo "$out" | awk '$1 ~ /^[0-9]+$/ && NF >= 12 {print $5 / 1000; exit}')
  printf 'run %3d  status %d  %6.1f s  median %s ms  bench %s\n' "$i" "$status" "$seconds" \
    "${median:-?}" "$args"
  if [ "$status" -ne 0 ]; then
    failed=$((failed + 1))
    echo "$out" | grep -E 'EXCEEDED|rror|wrong' | head -5
  fi
  slowest=$(awk -v a="$seconds" -v b="$slowest" 'BEGIN { print (a > b ? a : b) }')
done
echo "contention.sh: $runs runs beside $busy busy loops, $failed failed, slowest run ${slowest} s"
[ "$failed" -eq 0 ]
