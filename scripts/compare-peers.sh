#!/usr/bin/env bash
# Measures chorus against its peers (Open MPI, MPICH, Gloo) in one interleaved run and prints
# how far apart they are. The peer harness ../shared/peers/run_all.sh runs the matrix
# rep x mode x ranks x library; chorus joins through its EXTRA_BENCH hook, so in every
# (rep, mode, ranks) cell `chorus bench --csv` runs right after the peers, three times: thread
# ranks (lib chorus-thread), shm process ranks (chorus-shm) and tcp process ranks on loopback
# (chorus-tcp; the bench re-executes itself under `chorus launch`, which makes the job secret).
# Noise on this machine moves medians by ~25 % between runs, so only figures from the same run
# are compared, and only as ratios.
#
#   scripts/compare-peers.sh                                   # full matrix, see runtime below
#   REPS=1 MODES=keepheap NPS=2 COUNTS=8 scripts/compare-peers.sh   # smoke test, ~1 minute
#   BUSY="0 1 2" OPS=allreduce scripts/compare-peers.sh         # under load, with means
#
# Under load (BUSY set): the same comparison beside busy processes, `( while :; do :; done ) &`
# as a training job's data loader or a compile would be. For each repetition, each entry of
# BUSY (busy loops started before and killed after each run), each NPS and each library in
# turn (Open MPI, MPICH, chorus thread and shm ranks; TCP with CHORUS_TCP=1), one run times
# one collective at one size (each of OPS and COUNTS in turn) with at least MIN_TIME [2]
# seconds of calls, so that the libraries compared in a cell run within seconds of each other:
# the development host's speed between its two vCPUs changes every few seconds to minutes
# (a 2-rank 32-byte call takes 0.23 or 0.55 µs, a 1 MiB shm copy 5-8 times longer), and
# a ratio between runs minutes apart mixes the two. Before each run (and its busy loops) a
# probe times a 2-rank 32-byte all-reduce on thread ranks; its median goes into the run's
# file as "#probe_us,X", and the table pairs each chorus run with the peers' runs of the same
# repetition and cell, whose probes agree. Every side reports
# the mean per call beside the median: chorus through `chorus bench --mean`, the MPI peers
# through scripts/peer_mean.h, which this script force-includes when it builds them (their
# source stays as it is). run_all.sh is not used there: it cannot lift the peers' ceiling of
# 100000 calls, which a 32-byte size reaches in a fraction of the 2 s. The lib column names the
# load ("openmpi@busy1"); the table gains a mean section. Gloo is left out (it is the TCP
# peer, and the issue's targets are the MPI libraries on one host).
#
# Knobs (environment variables, defaults in brackets):
#   REPS [3]              repetitions of the whole matrix (outermost loop)
#   MODES ["keepheap default"]
#                         default: libraries as shipped; keepheap: glibc keeps freed memory,
#                         which spares Open MPI / MPICH their per-call page faults (the lib
#                         column gets "+keepheap"). chorus is measured in both modes
#   NPS ["2 4"]           rank counts (4 oversubscribes the 2 cores)
#   COUNTS [8,262144,16777216]
#                         total float32 elements; chorus gets --sizes 4*COUNT bytes
#                         (32 B, 1 MiB, 64 MiB)
#   PEERS_DIR [<repo>/../shared/peers]   where run_all.sh lives
#   PEERS_WORK            peer binaries and raw results (run_all.sh default:
#                         ${TMPDIR:-/tmp}/chorus-peers)
#   CHORUS_BIN [<repo>/build/chorus]     built (target chorus_cli in build/) when the default
#                         is missing; the run uses a private copy, so a rebuild midway is harmless
#   OUT_DIR [<repo>/build/compare/<timestamp>]
#   TOTAL_BUDGET [3600]   seconds before run_all.sh skips the remaining runs (its own default
#                         of 1140 is too short once chorus runs in every cell)
#   EXTRAS [0]            1 = also run run_all.sh's one-off peer variants (not compared here)
#   OPS [allreduce,reduce_scatter,allgather,broadcast,reduce,alltoall,gather,scatter,allgatherv,barrier,sendrecv]
#                         the peers' collectives (run_all.sh's names)
#   JOBS [2]              compile jobs when chorus has to be built
#   MIN_TIME, MIN_ITERS, RUN_TIMEOUT, SKIP_BUILD, LIBS pass through to run_all.sh.
#   BUSY [unset]          busy-loop counts, e.g. "0 1 2": run the load comparison above
#   CHORUS_TCP [0]        1 = the load comparison also runs chorus over TCP on loopback
#
# Output in OUT_DIR: peers.csv (every per-run row, 9 columns as summarize.py reads them),
# run_all.out / run_all.log (the harness's stdout and progress), table.md and one
# busbw_<op>.png per collective, written by scripts/compare_peers.py, which also prints the
# table. Each figure is the median over REPS of the per-run medians. The ratio columns divide
# chorus's median time by a peer's, so < 1 means chorus is faster (0.5 = twice as fast) and
# > 1 means it is slower. "best" is the fastest peer in either mode (a "+keepheap" row counts
# as that peer); "gloo" is Gloo's better mode, the like-for-like partner of chorus over TCP.
# chorus's own columns come from its default mode (keepheap when MODES lacks default).
#
# Runtime (estimate): the defaults take about 15-20 minutes, ~12 for the peers (run_all.sh's
# full matrix is ~14 minutes with its five sizes and extras) and ~5 for chorus, whose 12
# (rep, mode, ranks) cells cost ~20-30 s each, most of it tcp at 64 MiB. The smoke test above
# takes ~20 s plus the peers' build (~1 minute, skipped with SKIP_BUILD=1).
# Under load, a run per library, collective, size, rank count and load: REPS=3 BUSY="0 1 2"
# NPS="2 4" COUNTS=8,262144 OPS=allreduce,reduce_scatter,allgather is 432 runs, ~43 minutes.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
peers_dir=${PEERS_DIR:-$root/../shared/peers}
chorus_bin=${CHORUS_BIN:-$root/build/chorus}
out_dir=${OUT_DIR:-$root/build/compare/$(date +%Y%m%d-%H%M%S)}
python=/usr/bin/python3   # the system Python has matplotlib; a pyenv python3 may not

export REPS=${REPS:-3}
export MODES=${MODES:-"keepheap default"}
export NPS=${NPS:-"2 4"}
export COUNTS=${COUNTS:-8,262144,16777216}
export TOTAL_BUDGET=${TOTAL_BUDGET:-3600}
export EXTRAS=${EXTRAS:-0}
# Every op chorus has that the peers time too (chorus itself runs --ops all).
export OPS=${OPS:-allreduce,reduce_scatter,allgather,broadcast,reduce,alltoall,gather,scatter,allgatherv,barrier,sendrecv}

die() {
  echo "compare-peers.sh: $*" >&2
  exit 1
}

# The comparison under load (BUSY set; see the top of this file). Writes $out_dir/peers.csv.
busy_pids=()
stop_busy() {
  if [ ${#busy_pids[@]} -gt 0 ]; then
    kill "${busy_pids[@]}" 2> /dev/null || true
    wait "${busy_pids[@]}" 2> /dev/null || true
  fi
  busy_pids=()
}
# Runs a benchmark command and prints its output. An MPI peer sizes its timed loop from three
# probe iterations, and one that a busy process preempted makes the loop thousands of times too
# short (milliseconds instead of MIN_TIME seconds: 230 calls of a 32-byte all-gather, whose
# mean then missed every time slice). The peer reports its loop's wall time ("#loop_s", from
# scripts/peer_mean.h); a loop shorter than min_time runs again with --min-iters scaled from
# it, up to three times, as chorus bench extends a run planned from a stalled probe. Only the
# last run's output is printed; the earlier runs' loop times go to the error file.
run_long_enough() {
  local min_time=$1 run_timeout=$2 err=$3 out loop calls want attempt rc
  shift 3
  for attempt in 1 2 3; do
    rc=0
    out=$(timeout -k 5 "$run_timeout" "$@" 2>> "$err") || rc=$?
    loop=$(awk -F, '$1 == "#loop_s" { print $2; exit }' <<< "$out")
    calls=$(awk -F, '$1 == "#mean_us" { print $3; exit }' <<< "$out")
    if [ $rc -ne 0 ] || [ -z "$loop" ] || [ -z "$calls" ] || [ "$attempt" = 3 ] ||
      awk -v l="$loop" -v m="$min_time" 'BEGIN { exit !(l >= m) }'; then
      break
    fi
    # 10 % more calls than the loop's pace asks for, at least twice as many as it had
    want=$(awk -v c="$calls" -v l="$loop" -v m="$min_time" \
      'BEGIN { w = c * m / (l > 0 ? l : 1e-9) * 1.1; if (w < 2 * c) w = 2 * c;
               if (w > 100000000) w = 100000000; printf "%d", w }')
    echo "compare-peers.sh: loop of $calls calls took $loop s, under $min_time s:" \
      "again with --min-iters $want" >> "$err"
    set -- "$@" --min-iters "$want" --max-iters "$want"
  done
  printf '%s\n' "$out"
  return $rc
}
run_under_load() {
  local min_time=${MIN_TIME:-2} run_timeout=${RUN_TIMEOUT:-600} bin_dir="$out_dir/bin"
  local flags="-O3 -march=native -std=c++17 -Wall -Wno-sign-compare"
  mkdir -p "$bin_dir" "$out_dir/raw"
  command -v mpicxx.openmpi > /dev/null && command -v mpicxx.mpich > /dev/null ||
    die "the load comparison needs Open MPI and MPICH: apt-get install openmpi-bin libopenmpi-dev mpich libmpich-dev"
  echo "compare-peers.sh: building the MPI peers with scripts/peer_mean.h" >&2
  mpicxx.openmpi $flags -include "$root/scripts/peer_mean.h" -o "$bin_dir/mpi_coll_bench_openmpi" \
    "$peers_dir/mpi_coll_bench.cpp" || die "could not build the Open MPI peer"
  mpicxx.mpich $flags -include "$root/scripts/peer_mean.h" -o "$bin_dir/mpi_coll_bench_mpich" \
    "$peers_dir/mpi_coll_bench.cpp" || die "could not build the MPICH peer"
  local libs="openmpi mpich chorus-thread chorus-shm"
  [ "${CHORUS_TCP:-0}" = 1 ] && libs+=" chorus-tcp"
  local peer_args=(--min-time "$min_time" --max-iters 4000000)
  local ops counts_list
  IFS=, read -r -a ops <<< "$OPS"
  IFS=, read -r -a counts_list <<< "$COUNTS"
  trap 'stop_busy; rm -f "$bin_copy"' EXIT
  echo "compare-peers.sh: REPS=$REPS BUSY=\"$BUSY\" NPS=\"$NPS\" COUNTS=$COUNTS OPS=$OPS" \
    "MIN_TIME=$min_time -> $out_dir" >&2
  local rep busy np op count lib cmd name rc probe
  for rep in $(seq 1 "$REPS"); do
    for busy in $BUSY; do
      for np in $NPS; do
        for op in "${ops[@]}"; do
          for count in "${counts_list[@]}"; do
            for lib in $libs; do
              case $lib in
                openmpi)
                  cmd=(mpirun.openmpi --allow-run-as-root --oversubscribe -np "$np"
                    "$bin_dir/mpi_coll_bench_openmpi" --lib "openmpi@busy$busy"
                    --ops "$op" --counts "$count" "${peer_args[@]}") ;;
                mpich)
                  cmd=(mpirun.mpich -np "$np" "$bin_dir/mpi_coll_bench_mpich"
                    --lib "mpich@busy$busy" --ops "$op" --counts "$count" "${peer_args[@]}") ;;
                chorus-*)
                  cmd=("$bin_copy" bench --csv --mean --min-seconds "$min_time" -n "$np"
                    --ops "$op" --sizes "$((4 * count))" --transport "${lib#chorus-}"
                    --lib "$lib@busy$busy") ;;
              esac
              name="rep${rep}_busy${busy}_np${np}_${op}_${count}_${lib}"
              # The host's speed between its two CPUs, just before the run, on a quiet machine:
              # the median of a 2-rank 32-byte all-reduce on thread ranks.
              probe=$("$bin_copy" bench --csv -n 2 --ops allreduce --sizes 32 --iters 20000 \
                --transport thread 2> /dev/null | awk -F, '$1 == "chorus" { print $6 }') || true
              for _ in $(seq 1 "$busy"); do
                (while :; do :; done) &
                busy_pids+=($!)
              done
              rc=0
              {
                echo "#probe_us,${probe:-nan}"
                run_long_enough "$min_time" "$run_timeout" "$out_dir/raw/$name.err" \
                  "${cmd[@]}" || rc=$?
              } > "$out_dir/raw/$name.csv"
              stop_busy
              echo "compare-peers.sh: $name rc=$rc probe=${probe:-?} us" >&2
              [ $rc -eq 0 ] || tail -3 "$out_dir/raw/$name.err" >&2
            done
          done
        done
      done
    done
  done
  {
    echo "lib,op,ranks,count,bytes,median_us,min_us,algbw_GBs,busbw_GBs"
    for f in "$out_dir"/raw/rep*.csv; do
      echo "# $(basename "$f" .csv)"
      grep -v -e '^lib,' -e '^# ' "$f" || true
    done
  } > "$out_dir/peers.csv"
}

if [ ! -x "$peers_dir/run_all.sh" ]; then
  die "no peer harness at $peers_dir/run_all.sh; set PEERS_DIR to the shared/peers directory"
fi
[ -x "$python" ] || die "$python not found (apt-get install python3-matplotlib)"
"$python" -c 'import matplotlib' 2> /dev/null ||
  die "$python has no matplotlib (apt-get install python3-matplotlib)"

# Only the default binary is built here: an explicit CHORUS_BIN is the caller's to provide.
if [ ! -x "$chorus_bin" ]; then
  if [ -n "${CHORUS_BIN:-}" ]; then
    die "CHORUS_BIN=$CHORUS_BIN is not an executable"
  fi
  echo "compare-peers.sh: $chorus_bin missing, building target chorus_cli in build/" >&2
  if [ ! -f "$root/build/CMakeCache.txt" ]; then
    cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
  fi
  cmake --build "$root/build" -j "${JOBS:-2}" --target chorus_cli
  [ -x "$chorus_bin" ] || die "built chorus_cli, but $chorus_bin is still missing"
fi

# chorus takes total bytes; the peers take float32 element counts.
sizes=""
IFS=, read -r -a counts <<< "$COUNTS"
for count in "${counts[@]}"; do
  [[ $count =~ ^[1-9][0-9]*$ ]] || die "COUNTS entry '$count' is not a positive integer"
  sizes+="${sizes:+,}$((4 * count))"
done

mkdir -p "$out_dir"
bin_copy=$(mktemp "${TMPDIR:-/tmp}/chorus-compare.XXXXXX")
trap 'rm -f "$bin_copy"' EXIT
cp "$chorus_bin" "$bin_copy"
chmod +x "$bin_copy"

if [ -n "${BUSY:-}" ]; then
  run_under_load
  "$python" "$root/scripts/compare_peers.py" "$out_dir/peers.csv" "$out_dir"
  exit 0
fi

# run_all.sh runs this with bash -c once per (rep, mode, ranks), NP, MODE and SUFFIX set. All
# three transports run even when one fails; the first failure's status reaches run_all.sh,
# which records it in failed.txt.
export COMPARE_CHORUS_BIN=$bin_copy COMPARE_CHORUS_SIZES=$sizes
# shellcheck disable=SC2016  # expanded by run_all.sh's bash -c, not here
export EXTRA_BENCH='rc=0
for t in thread shm tcp; do
  "$COMPARE_CHORUS_BIN" bench --csv --lib "chorus-$t$SUFFIX" -n "$NP" --ops all \
    --sizes "$COMPARE_CHORUS_SIZES" --transport "$t" || { s=$?; [ $rc -ne 0 ] || rc=$s; }
done
exit $rc'

echo "compare-peers.sh: REPS=$REPS MODES=\"$MODES\" NPS=\"$NPS\" COUNTS=$COUNTS -> $out_dir" >&2
# Progress goes to the terminal and to run_all.log; the harness's own CSV to run_all.out.
"$peers_dir/run_all.sh" 2>&1 > "$out_dir/run_all.out" | tee "$out_dir/run_all.log" >&2 ||
  die "run_all.sh failed; see $out_dir/run_all.log"

# run_all.sh prints only its aggregate on stdout; the per-run rows stay in its results folder,
# which its last progress line names.
results=$(sed -n 's/.*; results in //p' "$out_dir/run_all.log" | tail -1)
if [ -z "$results" ] || [ ! -d "$results/raw" ]; then
  die "could not find run_all.sh's results folder in $out_dir/run_all.log"
fi
shopt -s nullglob
raw_files=("$results"/raw/rep*.csv)
[ ${#raw_files[@]} -gt 0 ] || die "no per-run CSV files in $results/raw"
{
  echo "lib,op,ranks,count,bytes,median_us,min_us,algbw_GBs,busbw_GBs"
  for f in "${raw_files[@]}"; do
    echo "# $(basename "$f" .csv)"
    grep -v -e '^lib,' -e '^#' "$f" || true
  done
} > "$out_dir/peers.csv"
for f in failed.txt skipped.txt; do
  if [ -f "$results/$f" ]; then
    echo "compare-peers.sh: warning: run_all.sh reported ($results/$f):" >&2
    sed 's/^/  /' "$results/$f" >&2
  fi
done

"$python" "$root/scripts/compare_peers.py" "$out_dir/peers.csv" "$out_dir"
