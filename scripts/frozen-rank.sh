#!/usr/bin/env bash
# frozen-rank.sh: stops one rank of a running job with SIGSTOP and checks that every survivor's
# error names it (issue 10: the first rank to time out used to name its neighbour, a survivor).
#
#   scripts/frozen-rank.sh [TRIALS] [TRANSPORT]     # default 20 trials, shm; or tcp
#
# Each trial starts examples/04_training_loop on 4 ranks under chorus launch with
# CHORUS_TIMEOUT_MS=2000, stops rank 2 after a random 0.5-1.5 s, and reads the survivors' lines
# ("[r] rank r: step s: DEADLINE_EXCEEDED: ..."). A trial passes when at least one survivor
# reported and every report names "rank 2 is behind". Exits 1 if any trial failed.
set -uo pipefail
cd "$(dirname "$0")/.."
trials=${1:-20}
transport=${2:-shm}
chorus=${CHORUS:-./build/chorus}
prog=${PROG:-./build/examples/04_training_loop}
for f in "$chorus" "$prog"; do
  [ -x "$f" ] || { echo "frozen-rank.sh: $f not built (make build)" >&2; exit 2; }
done
failed=0
for t in $(seq 1 "$trials"); do
  out=$(mktemp)
  CHORUS_TIMEOUT_MS=2000 CHORUS_TRANSPORT=$transport "$chorus" launch -n 4 -- "$prog" 100000000 \
    >"$out" 2>&1 &
  launcher=$!
  sleep "$(awk -v s="$RANDOM" 'BEGIN { srand(s); printf "%.2f", 0.5 + rand() }')"
  frozen=""
  for pid in $(pgrep -P "$launcher"); do
    # Read whole first: grep -q would stop early, and pipefail count tr's SIGPIPE as a miss.
    environment=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null || true)
    if grep -qx 'CHORUS_RANK=2' <<<"$environment"; then
      kill -STOP "$pid" && frozen=$pid
    fi
  done
  wait "$launcher"
  [ -n "$frozen" ] && kill -KILL "$frozen" 2>/dev/null
  reports=$(grep -E '^\[[013]\] rank [013]: step' "$out")
  total=$(printf '%s\n' "$reports" | grep -c . || true)
  naming=$(printf '%s\n' "$reports" | grep -c 'rank 2 is behind' || true)
  verdict=ok
  if [ -z "$frozen" ] || [ "$total" -eq 0 ] || [ "$naming" -ne "$total" ]; then
    verdict=FAILED
    failed=$((failed + 1))
  fi
  printf 'trial %2d (%s): %s, %d of %d survivor reports name rank 2\n' "$t" "$transport" \
    "$verdict" "$naming" "$total"
  [ "$verdict" = ok ] || sed 's/^/    /' "$out" | head -8
  rm -f "$out"
done
echo "frozen-rank.sh: $trials trials on $transport, $failed failed"
[ "$failed" -eq 0 ]
