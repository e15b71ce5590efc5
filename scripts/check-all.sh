#!/usr/bin/env bash
# Checks every algorithm's results with `chorus bench -c`: each (transport, ranks, collective,
# algorithm) row of the selection table over sizes 4 B .. 64 MiB (factor 2), every output
# element compared with the exact expectation. Prints one line per run and a final count; exits
# non-zero when any run reports a wrong element or fails.
#
#   scripts/check-all.sh                           # thread shm tcp x p 2 3 4 8, ~25 minutes
#   TRANSPORTS=thread NPS="2 3" MAXBYTES=1M scripts/check-all.sh   # a quick subset
#
# Knobs: CHORUS_BIN [<repo>/build/chorus], TRANSPORTS ["thread shm tcp"], NPS ["2 3 4 8"],
# MINBYTES [4], MAXBYTES [64M], DTYPE [float32], REDOP [sum], LOG_DIR [<repo>/build/check-all].
# Each run does one warm-up and one checked call per size, so this measures nothing.
set -uo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${CHORUS_BIN:-$repo/build/chorus}
transports=${TRANSPORTS:-thread shm tcp}
nps=${NPS:-2 3 4 8}
log_dir=${LOG_DIR:-$repo/build/check-all}
mkdir -p "$log_dir"
[[ -x $bin ]] || { echo "check-all: no chorus binary at $bin (build target chorus_cli)" >&2; exit 2; }

# "collective name" pairs from the selection table; hierarchical needs several hosts, which
# scripts/../tests/netns covers, so it is skipped here.
mapfile -t algos < <("$bin" bench --list-algos | awk '!/^#/ && $2 != "hierarchical" {print $1, $2}')

runs=0
failed=0
for transport in $transports; do
  for p in $nps; do
    for entry in "${algos[@]}"; do
      read -r op algo <<<"$entry"
      log="$log_dir/${transport}_p${p}_${op}_${algo}.log"
      "$bin" bench --transport "$transport" -n "$p" --op "$op" --algo "$algo" -c \
        -b "${MINBYTES:-4}" -e "${MAXBYTES:-64M}" -f 2 -w 1 --iters 1 \
        -d "${DTYPE:-float32}" -o "${REDOP:-sum}" >"$log" 2>&1
      rc=$?
      runs=$((runs + 1))
      # Result rows carry #wrong twice: out of place (column 8) and in place (column 12).
      wrong=$(awk '/^ *[0-9]+ +[0-9]+ / {sum += $8 + $12} END {print sum + 0}' "$log")
      if [[ $rc -ne 0 || $wrong -ne 0 ]]; then
        failed=$((failed + 1))
        echo "FAIL $transport p=$p $op $algo: exit $rc, #wrong $wrong (log: $log)"
      else
        echo "ok   $transport p=$p $op $algo"
      fi
    done
  done
done
echo "check-all: $runs runs, $failed failed"
[[ $failed -eq 0 ]]
