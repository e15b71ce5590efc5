#!/usr/bin/env bash
# chorus bench --busy N: the benchmark runs beside N busy processes, reports the mean per call
# beside the median, checks every result, and leaves no busy process behind, also when its ranks
# are processes (the parent then execs into chorus launch, and its busy children die with it).
#
#   tests/cli_busy.sh path/to/chorus thread|shm
set -u
bin=$1
transport=$2
tag="busy-test-$$-$transport"
fail() {
  echo "cli_busy.sh ($transport): $*" >&2
  exit 1
}

out=$("$bin" bench --transport "$transport" -n 2 --ops allreduce,allgather --sizes 64,4K -c \
  --busy 2 --min-seconds 0.05 --lib "$tag") || fail "bench failed: $out"
echo "$out"
grep -q '^# beside 2 busy processes' <<< "$out" || fail "the table does not say what ran beside"
grep -q '^# Out of bounds values : 0 OK' <<< "$out" || fail "wrong results"

out=$("$bin" bench --transport "$transport" -n 2 --ops allreduce,allgather --sizes 64,4K -c \
  --csv --busy 1 --min-seconds 0.05 --lib "$tag") || fail "bench --csv failed: $out"
echo "$out"
# Each row follows its mean line: the mean, the calls, their seconds and the slowest call.
rows=$(grep -c "^$tag,\(allreduce\|allgather\),2," <<< "$out")
means=$(grep -cE '^#mean_us,[0-9.]+,[1-9][0-9]*,[0-9.]+,[0-9.]+$' <<< "$out")
[ "$rows" = 4 ] && [ "$means" = 4 ] || fail "want 4 rows, each after its mean line"
[ "$(grep -v '^#' <<< "$out" | grep -c '')" = 4 ] || fail "a line that is neither a row nor a mean"

# Gone when the benchmark is (they die by PR_SET_PDEATHSIG at its exit; allow the kernel 10 s).
# The command lines are read from /proc (no procps needed); tr's own does not hold the tag.
left_behind() {
  local f line
  for f in /proc/[0-9]*/cmdline; do
    line=$(tr '\0' ' ' 2> /dev/null < "$f") || continue
    [[ $line == *"$tag"* ]] && echo "${f%/cmdline}: $line"
  done
  return 0
}
for _ in $(seq 100); do
  [ -z "$(left_behind)" ] && exit 0
  sleep 0.1
done
fail "busy processes left behind: $(left_behind)"
