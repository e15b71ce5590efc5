#!/bin/bash
# tests/netns/run.sh: multi-host tests of chorus on one machine. Every "host" is a network
# namespace with its own address and hostname, joined to the others by a bridge; ranks are
# started in them through tests/netns/netns-rsh, an ssh stand-in, by `chorus launch --hosts` or
# by mpirun. Needs root; registered in ctest (netns_*) with SKIP_RETURN_CODE 77.
#
#   tests/netns/run.sh SCENARIO --chorus build/chorus --job build/tests/netns_job
#
# Scenarios:
#   plumbing    no chorus collectives: both launchers run `hostname; ip -4 addr` on 2 hosts x 2
#   launch_2x2  chorus launch, 2 hosts x 2 ranks, netns_job (every element checked)
#   launch_4x1  chorus launch, 4 hosts x 1 rank
#   mpirun_2x2  mpirun with a hostfile of the namespaces and plm_rsh_agent netns-rsh
#   netem       launch_2x2 with netem delay 2ms loss 1% on every host's eth0
#   loss        launch_2x2 while nftables on every host drops 2% of the TCP packets entering and
#               leaving eth0 at random: packet loss without sch_netem. Every element must still
#               be right, and the rules' counters must show drops
#   shaped      launch_2x2 with every host's eth0 limited to 200 Mbit/s (tbf): full socket
#               buffers and partial writes on every link
#   kill        launch_2x2 where rank 2 SIGKILLs itself after 4 collectives: every other rank
#               must fail with UNAVAILABLE naming rank 2 before its 20 s deadline
#   partition   launch_2x2 looping until failure; host 2's link goes down mid-job (no FIN, no
#               RST: a black hole). Every rank must fail (deadline, unavailable or aborted), none
#               may hang
#
# Network: bridge chorus-br<S> with 10.77.<S>.254/24 in the root namespace; host i (1-based) is
# namespace chorus-s<S>-h<i> with eth0 = 10.77.<S>.<i>/24 and lo up, no default route, IPv6 off.
# S is the first free slot (0-31), taken with flock on /run/chorus-netns/slot<S>.lock, so
# concurrent runs do not collide; a new owner of a slot first removes what a killed run left in
# it (links, namespace files, the work directory /run/chorus-netns/s<S>). Everything runs in a
# private mount namespace whose /etc/hosts names the fake hosts and whose name service never
# asks DNS, so nothing here sends a packet beyond the bridge or lo.
# The namespaces' mounts live in that mount namespace too: when this script dies, even by
# SIGKILL, the namespaces go with it; only the bridge and the work directory can be left over,
# for the next owner of the slot to remove.
#
# Exit status: 0 pass, 1 fail (the reason on stderr), 2 usage, 77 skipped ("SKIPPED: why").
# shellcheck disable=SC2016  # single-quoted $ is for the shells of the ranks
set -u
set -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly here
readonly kSkip=77
readonly kLockDir=/run/chorus-netns
readonly kMaxSlots=32
readonly kJobTimeoutMs=20000
readonly kLossPerMille=20        # loss: share of TCP packets dropped, each way on each host
readonly kLossJobTimeoutMs=60000 # loss: a dropped SYN alone costs 1 s, then 2 s, ...

skip() {
  echo "SKIPPED: $*"
  exit "$kSkip"
}
fail() {
  echo "FAILED: $*" >&2
  exit 1
}
note() { echo "netns: $*" >&2; }

usage() {
  echo "usage: $0 plumbing|launch_2x2|launch_4x1|mpirun_2x2|netem|loss|shaped|kill|partition" \
    "--chorus PATH [--job PATH]" >&2
  exit 2
}

scenario=${1:-}
[ -n "$scenario" ] || usage
shift
chorus=
job=
while [ $# -gt 0 ]; do
  case $1 in
    --chorus) chorus=${2:-}; shift 2 ;;
    --job) job=${2:-}; shift 2 ;;
    *) usage ;;
  esac
done
case $scenario in
  plumbing | launch_2x2 | launch_4x1 | mpirun_2x2 | netem | loss | shaped | kill | partition) ;;
  *) usage ;;
esac
[ -x "$chorus" ] || fail "--chorus must name the chorus binary (got '$chorus')"
if [ "$scenario" != plumbing ]; then
  [ -x "$job" ] || fail "--job must name the netns_job binary (got '$job')"
fi
chorus=$(realpath "$chorus")
[ -n "$job" ] && job=$(realpath "$job")

# ------------------------------------------------------------------ can we run at all?

[ "$(id -u)" = 0 ] || skip "network namespaces need root (running as uid $(id -u))"
for tool in ip unshare flock mount hostname setpriv timeout; do
  command -v "$tool" > /dev/null || skip "$tool is not installed"
done
if [ "$scenario" = plumbing ] || [ "$scenario" = mpirun_2x2 ]; then
  command -v mpirun > /dev/null || skip "mpirun (Open MPI) is not installed"
fi
if [ "$scenario" = loss ]; then
  command -v nft > /dev/null || skip "nft (Debian package nftables) is not installed"
fi

# Re-run inside a private mount namespace (see the header).
if [ -z "${CHORUS_NETNS_INNER:-}" ]; then
  if ! err=$(unshare --mount --propagation private true 2>&1); then
    skip "cannot create a mount namespace: $err"
  fi
  CHORUS_NETNS_INNER=1 exec unshare --mount --propagation private -- \
    /bin/bash "${BASH_SOURCE[0]}" "$scenario" --chorus "$chorus" ${job:+--job "$job"}
fi

# Nothing from the caller's job environment may leak into the ranks.
for var in $(env | sed -n 's/^\(CHORUS_[A-Z0-9_]*\)=.*/\1/p'); do unset "$var"; done
unset MASTER_ADDR MASTER_PORT RANK WORLD_SIZE LOCAL_RANK

# ------------------------------------------------------------------ slot and cleanup

{ mkdir -p "$kLockDir" && chmod 700 "$kLockDir"; } || skip "cannot create $kLockDir"
slot=
for ((s = 0; s < kMaxSlots; ++s)); do
  exec {lock_fd}> "$kLockDir/slot$s.lock" || continue
  if flock -n "$lock_fd"; then
    slot=$s
    break
  fi
  exec {lock_fd}>&-
done
[ -n "$slot" ] || skip "all $kMaxSlots slots under $kLockDir are in use by other runs"
readonly slot
readonly prefix="chorus-s$slot"
readonly bridge="chorus-br$slot"
readonly subnet="10.77.$slot"
readonly work="$kLockDir/s$slot" # hostfile, secret, logs, bootstrap files
hosts=()       # namespace names, which are also the hosts' names
launcher_pid=  # the running `timeout` around a launcher

# Removes every namespace and link of this slot: ours, or a killed run's.
remove_slot() {
  local ns pid link
  for ns in $(ip netns list 2> /dev/null | awk '{print $1}' | grep "^$prefix-h"); do
    for pid in $(ip netns pids "$ns" 2> /dev/null); do kill -KILL "$pid" 2> /dev/null; done
    ip netns del "$ns" 2> /dev/null
  done
  for link in $(ip -o link show 2> /dev/null | grep -o "$prefix-v[0-9]*" | sort -u); do
    ip link del "$link" 2> /dev/null
  done
  ip link del "$bridge" 2> /dev/null
  # A killed run's namespace files (their mounts died with its mount namespace).
  rm -f /run/netns/"$prefix"-h* 2> /dev/null
  rm -rf "$work"
}

cleanup() {
  local status=$?
  trap - EXIT INT TERM HUP
  # A launcher still running takes its ranks along (they die with it: PR_SET_PDEATHSIG).
  [ -n "$launcher_pid" ] && kill -KILL "$launcher_pid" 2> /dev/null
  remove_slot
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

remove_slot

# ------------------------------------------------------------------ name service

mkdir -m 700 "$work" || fail "cannot create $work"
{
  echo "127.0.0.1 localhost $(hostname)"
  echo "$subnet.254 $bridge"
  for ((i = 1; i <= 8; ++i)); do echo "$subnet.$i $prefix-h$i"; done
} > "$work/hosts"
echo "hosts: files" > "$work/nsswitch.conf"
echo "nameserver 127.0.0.1" > "$work/resolv.conf"
for f in hosts nsswitch.conf resolv.conf; do
  mount --bind "$work/$f" "/etc/$f" || skip "cannot bind-mount /etc/$f in a mount namespace"
done

# ------------------------------------------------------------------ the network

# make_hosts N: the bridge and N namespaces on it.
make_hosts() {
  local n=$1 i ns veth err
  if ! err=$(ip link add "$bridge" type bridge 2>&1); then
    skip "cannot create a bridge: $err"
  fi
  sysctl -qw "net.ipv6.conf.$bridge.disable_ipv6=1" 2> /dev/null
  ip addr add "$subnet.254/24" dev "$bridge" || fail "address for $bridge"
  ip link set "$bridge" up || fail "bringing $bridge up"
  for ((i = 1; i <= n; ++i)); do
    ns="$prefix-h$i"
    veth="$prefix-v$i"
    if ! err=$(ip netns add "$ns" 2>&1); then
      skip "cannot create network namespace $ns: $err"
    fi
    hosts+=("$ns")
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 2> /dev/null
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.default.disable_ipv6=1 2> /dev/null
    if ! err=$(ip link add "$veth" type veth peer name eth0 netns "$ns" 2>&1); then
      skip "cannot create a veth pair: $err"
    fi
    sysctl -qw "net.ipv6.conf.$veth.disable_ipv6=1" 2> /dev/null
    ip link set "$veth" master "$bridge" up || fail "attaching $veth to $bridge"
    ip -n "$ns" link set lo up || fail "lo up in $ns"
    ip -n "$ns" addr add "$subnet.$i/24" dev eth0 || fail "address in $ns"
    ip -n "$ns" link set eth0 up || fail "eth0 up in $ns"
  done
  # Every host must reach every other one (and the bridge, where the store is) before a test
  # can mean anything.
  for ((i = 1; i <= n; ++i)); do
    wait_reachable "${hosts[i - 1]}" "$subnet.254"
    [ "$i" -gt 1 ] && wait_reachable "${hosts[i - 1]}" "$subnet.1"
  done
  note "slot $slot: ${hosts[*]} on $bridge ($subnet.0/24)"
}

# wait_reachable NS ADDR: a TCP connect from NS to ADDR port 9 gets an answer (a refusal will
# do) within 10 s. The bridge needs a moment before it forwards.
wait_reachable() {
  local ns=$1 addr=$2 t answer
  for ((t = 0; t < 100; ++t)); do
    if answer=$(ip netns exec "$ns" timeout 1 bash -c "exec 3<>/dev/tcp/$addr/9" 2>&1) ||
      [[ $answer == *refused* ]]; then
      return 0
    fi
    sleep 0.1
  done
  fail "$ns cannot reach $addr: $answer"
}

# shape QDISC...: the same root qdisc on every host's eth0, or a skip naming why not.
shape() {
  local ns err instead=
  [ "$1" = netem ] && instead="; the loss scenario covers packet loss with nftables instead"
  for ns in "${hosts[@]}"; do
    if ! err=$(ip netns exec "$ns" tc qdisc add dev eth0 root "$@" 2>&1); then
      skip "tc qdisc $1 is not available here: ${err:-unknown error}" \
        "(kernel without CONFIG_NET_SCH_${1^^}?)$instead"
    fi
  done
  note "every eth0: $*"
}

# drop_tcp PER_MILLE: on every host, nftables drops that share of the TCP packets entering and of
# those leaving eth0, at random, counting them (dropped_tcp reads the counts). All of the job's
# traffic is TCP, so the loss falls on the store, the handshakes and the data alike, and TCP has
# to retransmit its way through all of them. Rules go in after make_hosts, whose reachability
# probes must not fail by chance.
drop_tcp() {
  local ns err rules
  rules=$(
    cat << EOF
table inet chorus_loss {
  chain in {
    type filter hook input priority filter; policy accept;
    iifname "eth0" meta l4proto tcp numgen random mod 1000 < $1 counter drop
  }
  chain out {
    type filter hook output priority filter; policy accept;
    oifname "eth0" meta l4proto tcp numgen random mod 1000 < $1 counter drop
  }
}
EOF
  )
  for ns in "${hosts[@]}"; do
    if ! err=$(ip netns exec "$ns" nft -f - <<< "$rules" 2>&1); then
      skip "nftables cannot drop packets here: ${err:-unknown error}" \
        "(kernel without CONFIG_NF_TABLES or CONFIG_NFT_NUMGEN?)"
    fi
  done
  note "every eth0: nftables drops $1 in 1000 TCP packets in each direction"
}

# dropped_tcp: prints the packets that drop_tcp's rules dropped, over all hosts, and notes each
# host's counts (in, out).
dropped_tcp() {
  local ns counts total=0 n
  for ns in "${hosts[@]}"; do
    counts=$(ip netns exec "$ns" nft list table inet chorus_loss |
      sed -n 's/.* counter packets \([0-9]*\) bytes .*/\1/p' | paste -sd ' ')
    note "$ns dropped ${counts:-nothing?} (in out)"
    for n in $counts; do total=$((total + n)); done
  done
  echo "$total"
}

# ------------------------------------------------------------------ running and checking

out="$work/out"
err_log="$work/err"
run_status=0
run_seconds=0
run_started=0

# run_start CMD...: starts a launcher with a hard time limit, in the background, so that a signal
# to this script runs its trap now, not after the job. Should this script be killed (a ctest
# timeout), PR_SET_PDEATHSIG takes `timeout` and then the launcher along, and the launchers take
# their ranks: nothing keeps the namespaces alive.
run_start() {
  run_started=$SECONDS
  note "running: $*"
  setpriv --pdeathsig KILL -- timeout --kill-after=10 240 \
    setpriv --pdeathsig KILL -- "$@" > "$out" 2> "$err_log" < /dev/null &
  launcher_pid=$!
}

# run_finish: waits for the launcher, then shows its output.
run_finish() {
  wait "$launcher_pid"
  run_status=$?
  launcher_pid=
  run_seconds=$((SECONDS - run_started))
  sed 's/^/  out| /' "$out" >&2
  sed 's/^/  err| /' "$err_log" >&2
  note "exit status $run_status after ${run_seconds}s"
}

run() {
  run_start "$@"
  run_finish
}

# wait_stderr_lines N REGEX: until N lines of the running launcher's stderr match (30 s at most).
wait_stderr_lines() {
  local t
  for ((t = 0; t < 300; ++t)); do
    [ "$(grep -Ec -- "$2" "$err_log")" -ge "$1" ] && return 0
    kill -0 "$launcher_pid" 2> /dev/null || break
    sleep 0.1
  done
  run_finish
  fail "$scenario: expected $1 lines /$2/ on stderr"
}

expect_status() {
  [ "$run_status" = "$1" ] || fail "$scenario: the launcher exited $run_status, expected $1"
}

# expect_line REGEX [WHAT]: some line of stdout matches.
expect_line() {
  grep -Eq -- "$1" "$out" || fail "$scenario: no output line matches /$1/${2:+ ($2)}"
}

# expect_ok_ranks N PREFIX: every rank printed its ok line over TCP, and its join note named the
# host it was placed on (hosts_of[r]).
expect_ok_ranks() {
  local n=$1 tag=$2 r
  for ((r = 0; r < n; ++r)); do
    local p=${tag//R/$r}
    expect_line "^$p\[rank $r\] ok: [0-9]+ checks on transport tcp " "rank $r"
    grep -Eq -- "^$p\[rank $r\] joined $n ranks on host ${hosts_of[r]} over tcp\$" "$err_log" ||
      fail "$scenario: rank $r did not report joining on host ${hosts_of[r]} over tcp"
  done
  local lines
  lines=$(grep -c "ok: " "$out")
  [ "$lines" = "$n" ] || fail "$scenario: $lines ok lines for $n ranks"
}

secret_file() {
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/secret"
  chmod 600 "$work/secret"
  echo "$work/secret"
}

# chorus_launch [launch options] -- PROG...: on the hosts of $spec through netns-rsh, the store
# on the bridge. chorus_launch_start: the same in the background (finish with run_finish).
chorus_launch() {
  chorus_launch_start "$@"
  run_finish
}
chorus_launch_start() {
  run_start "$chorus" launch --hosts "$spec" --rsh "$here/netns-rsh" --store-host "$subnet.254" \
    --timeout-ms 200000 "$@"
}

# spec_for PER: spec = "h1:PER,h2:PER,..." for the current hosts, and hosts_of[rank] = the host
# that rank is placed on (in order, as both launchers place them).
spec=
hosts_of=()
spec_for() {
  local per=$1 ns k
  spec=
  hosts_of=()
  for ns in "${hosts[@]}"; do
    spec+="${spec:+,}$ns:$per"
    for ((k = 0; k < per; ++k)); do hosts_of+=("$ns"); done
  done
}

mpirun_job() {
  local per=$1
  shift
  local ns
  : > "$work/hostfile"
  for ns in "${hosts[@]}"; do echo "$ns slots=$per" >> "$work/hostfile"; done
  local n=$((per * ${#hosts[@]}))
  run mpirun --allow-run-as-root --oversubscribe --bind-to none -n "$n" --hostfile "$work/hostfile" \
    --mca plm_rsh_agent "$here/netns-rsh" --mca plm_rsh_no_tree_spawn 1 \
    --mca oob_tcp_if_include "$subnet.0/24" --mca oob_tcp_disable_ipv6_family 1 \
    --mca btl_tcp_if_include "$subnet.0/24" --mca btl_tcp_disable_family 6 \
    "${mpirun_env[@]}" "$@"
}

export CHORUS_TIMEOUT_MS=$kJobTimeoutMs
export CHORUS_BOOTSTRAP_DIR="$work"

case $scenario in
  plumbing)
    make_hosts 2
    spec_for 2
    probe='echo "rank $CHORUS_RANK local $CHORUS_LOCAL_RANK/$CHORUS_LOCAL_WORLD_SIZE on $(hostname)"'
    probe+='; ip -4 -o addr show dev eth0 | grep -o "inet [0-9.]*"'
    chorus_launch -- sh -c "$probe"
    expect_status 0
    for ((r = 0; r < 4; ++r)); do
      expect_line "^\[$r\] rank $r local $((r % 2))/2 on ${hosts_of[r]}\$"
      expect_line "^\[$r\] inet $subnet.$((r / 2 + 1))\$"
    done
    # A failing rank on the second host stops the job, and its status comes back.
    chorus_launch -- sh -c '[ "$CHORUS_RANK" = 3 ] && exit 5; sleep 60'
    expect_status 5
    grep -q "rank 3 exited with status 5; stopping the other 3 ranks" "$err_log" ||
      fail "plumbing: no note about rank 3's failure"
    mpirun_env=()
    mpirun_job 2 sh -c 'echo "rank $OMPI_COMM_WORLD_RANK on $(hostname)"; ip -4 -o addr show dev eth0'
    expect_status 0
    for ((r = 0; r < 4; ++r)); do expect_line "^rank $r on ${hosts_of[r]}\$"; done
    expect_line "eth0 +inet $subnet.1/24"
    expect_line "eth0 +inet $subnet.2/24"
    ;;
  launch_2x2 | netem | shaped)
    make_hosts 2
    [ "$scenario" = netem ] && shape netem delay 2ms loss 1%
    [ "$scenario" = shaped ] && shape tbf rate 200mbit burst 64kb latency 50ms
    spec_for 2
    chorus_launch -- "$job"
    expect_status 0
    expect_ok_ranks 4 '\[R\] '
    ;;
  loss)
    make_hosts 2
    drop_tcp "$kLossPerMille"
    spec_for 2
    # The full counts (up to 8 MB per rank): hundreds of drops, yet done in seconds, as fast
    # retransmits repair most of them. The deadline leaves room for a run of timeouts.
    export CHORUS_TIMEOUT_MS=$kLossJobTimeoutMs
    chorus_launch -- "$job"
    expect_status 0
    expect_ok_ranks 4 '\[R\] '
    dropped=$(dropped_tcp)
    [ "$dropped" -gt 0 ] || fail "loss: the job passed, but nftables dropped no packet"
    note "loss: $dropped TCP packets dropped in ${run_seconds}s"
    ;;
  launch_4x1)
    make_hosts 4
    spec_for 1
    chorus_launch -- "$job"
    expect_status 0
    expect_ok_ranks 4 '\[R\] '
    ;;
  mpirun_2x2)
    make_hosts 2
    spec_for 2
    # The secret from a file this time (chorus launch makes one up in the other scenarios).
    mpirun_env=(-x CHORUS_SECRET_FILE="$(secret_file)" -x CHORUS_TIMEOUT_MS -x CHORUS_BOOTSTRAP_DIR)
    mpirun_job 2 "$job"
    expect_status 0
    expect_ok_ranks 4 ''
    ;;
  kill)
    make_hosts 2
    spec_for 2
    crash=2
    chorus_launch --grace-ms 60000 -- "$job" --crash-rank $crash --crash-after 4
    expect_status 137
    grep -q "rank $crash was killed by signal 9" "$err_log" ||
      fail "kill: the launcher did not report rank $crash's death"
    for r in 0 1 3; do
      expect_line "^\[$r\] \[rank $r\] unavailable after [0-9]+ ms: UNAVAILABLE: .*rank $crash([^0-9]|\$)" \
        "rank $r must report rank $crash as unavailable"
    done
    [ "$run_seconds" -lt $((kJobTimeoutMs / 1000 + 30)) ] ||
      fail "kill: the job took ${run_seconds}s"
    ;;
  partition)
    make_hosts 2
    spec_for 2
    chorus_launch_start --grace-ms 60000 -- "$job" --until-failure --counts 1,1000,262147
    wait_stderr_lines 4 "\[rank [0-9]\] joined 4 ranks"
    sleep 1 # collectives in flight
    note "cutting ${hosts[1]} off the network"
    ip link set "$prefix-v2" down || fail "cannot take $prefix-v2 down"
    run_finish
    expect_status 4
    for r in 0 1 2 3; do
      expect_line "^\[$r\] \[rank $r\] cut off after [0-9]+ ms in round [0-9]+: " \
        "rank $r must fail, not hang"
    done
    ;;
esac
note "$scenario: PASSED"
