#!/usr/bin/env bash
# A small cluster on this one machine, for the MPI transport's multi-host
# tests and benchmarks: hosts made of Linux network namespaces, each with
# its own network stack, address and (through the launch agent's UTS
# namespace) hostname, joined by veth pairs on a bridge that lives in a
# namespace of its own. Nothing is added to the machine's own network
# namespace, and the tests address only these hosts. Needs root.
#
#   scripts/cluster.sh up [N]          N hosts (default 2): ruda-h1 .. ruda-hN at 10.211.0.11 ..
#   scripts/cluster.sh down            remove everything `up` made (idempotent)
#   scripts/cluster.sh status          the hosts and their links
#   scripts/cluster.sh mpirun ARGS...  mpirun on ruda-h1 across the hosts (hostfile, agent, MCA settings)
#   scripts/cluster.sh exec HOST CMD   run CMD on HOST (its namespaces, its hostname)
#   scripts/cluster.sh link HOST up|down   set HOST's link (a cut cable)
#   scripts/cluster.sh stall HOST MS   stop every process of HOST for MS milliseconds (SIGSTOP, SIGCONT)
#   scripts/cluster.sh loss HOST PCT   drop PCT % of the packets HOST receives (nftables; 0 clears)
#   scripts/cluster.sh dropped HOST    how many packets that rule has dropped
#   scripts/cluster.sh shape HOST RATE shape HOST's outgoing traffic to RATE (tc tbf, e.g. 10gbit; "off" clears)
#   scripts/cluster.sh slots           the slots of every host, for --hostfile (used by `mpirun`)
#
# The hosts share this machine's cores, so `mpirun` here tells Open MPI to
# yield when idle: each "host" holds no more ranks than its slots, so Open
# MPI does not know it is oversubscribed, and its blocking calls would spin
# through whole scheduler slices while the peer they wait for cannot run
# (raw 4 KiB collectives took 5-7.5 ms across two hosts of 2 ranks instead
# of 0.13-0.16 ms; ruda's waits back off on their own, which flattered it).
#
# `up` is idempotent (it tears down a half-made cluster first) and leaves
# nothing behind when it fails. This machine's kernel has no netem, so a
# stall is a stopped host (SIGSTOP on every process in its namespace, what
# a host paused by its hypervisor or a long GC looks like to its peers),
# loss is an nftables rule with a random number generator, and shaping is
# tbf (rate only).
set -euo pipefail

PREFIX=ruda-h
SWITCH=ruda-sw
BRIDGE=rbr0
SUBNET=10.211.0
MASK=24
STATE=/run/ruda-cluster
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

die() {
    echo "cluster: $*" >&2
    exit 1
}

# Every command but the help needs root (network namespaces): run again
# under sudo when not root, as scripts/install-mpi.sh installs with sudo.
as_root() {
    if [ "$(id -u)" != 0 ]; then
        command -v sudo >/dev/null || die "needs root (network namespaces), and sudo is missing"
        exec sudo --preserve-env=PATH,RUDA_CLUSTER_SLOTS bash "$0" "$@"
    fi
}

hosts() {
    cat "$STATE/hosts" 2>/dev/null || true
}

host_index() {
    local h=$1
    [[ $h =~ ^${PREFIX}([0-9]+)$ ]] || die "unknown host $h (hosts: $(hosts | tr '\n' ' '))"
    echo "${BASH_REMATCH[1]}"
}

check_host() {
    hosts | grep -qx "$1" || die "no host $1 (hosts: $(hosts | tr '\n' ' '); run: scripts/cluster.sh up)"
}

install_tools() {
    local missing=()
    command -v ip >/dev/null || missing+=(iproute2)
    command -v nft >/dev/null || missing+=(nftables)
    command -v unshare >/dev/null || missing+=(util-linux)
    if [ ${#missing[@]} -gt 0 ]; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
}

down() {
    local h
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^(${PREFIX}[0-9]+|${SWITCH})$" || true); do
        # Processes left in a host (a killed test's ranks) die with it.
        for pid in $(ip netns pids "$ns" 2>/dev/null || true); do
            kill -CONT "$pid" 2>/dev/null || true
            kill -KILL "$pid" 2>/dev/null || true
        done
        ip netns del "$ns" 2>/dev/null || true
    done
    for h in $(ls /etc/netns 2>/dev/null | grep -E "^${PREFIX}[0-9]+$" || true); do
        rm -rf "/etc/netns/$h"
    done
    rmdir /etc/netns 2>/dev/null || true
    rm -rf "$STATE"
}

up() {
    local n=${1:-2}
    [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 8 ] || die "up takes 1 to 8 hosts, not $n"
    install_tools
    down
    trap 'echo "cluster: up failed; tearing down" >&2; down' EXIT
    mkdir -p "$STATE"
    ip netns add "$SWITCH"
    ip -n "$SWITCH" link add "$BRIDGE" type bridge
    ip -n "$SWITCH" link set "$BRIDGE" up
    local i hostsfile="$STATE/etc-hosts"
    printf '127.0.0.1 localhost\n::1 localhost\n' >"$hostsfile"
    for i in $(seq 1 "$n"); do
        printf '%s.%d %s%d\n' "$SUBNET" $((10 + i)) "$PREFIX" "$i" >>"$hostsfile"
    done
    for i in $(seq 1 "$n"); do
        local h="$PREFIX$i"
        ip netns add "$h"
        ip -n "$h" link set lo up
        # The host's end is eth0; the switch's end is on the bridge. Both
        # are made inside their namespaces: nothing ever appears in the
        # machine's own, so a failed `up` leaves nothing that `down` (which
        # deletes the namespaces) misses.
        ip link add eth0 netns "$h" type veth peer name "rs$i" netns "$SWITCH"
        ip -n "$SWITCH" link set "rs$i" master "$BRIDGE"
        ip -n "$SWITCH" link set "rs$i" up
        ip -n "$h" addr add "$SUBNET.$((10 + i))/$MASK" dev eth0
        ip -n "$h" link set eth0 up
        # A connection with data in flight to a host that is gone fails
        # after ~6 s of retransmissions instead of Linux's ~15 min: Open
        # MPI 4.1's mpirun otherwise waits that long for the daemon of a
        # host whose link was cut before it ends the job (keepalives do not
        # apply to a connection with unacknowledged data).
        ip netns exec "$h" sysctl -q -w net.ipv4.tcp_retries2=4
        # `ip netns exec` binds /etc/netns/HOST/* over /etc: every host
        # resolves every host's name.
        mkdir -p "/etc/netns/$h"
        cp "$hostsfile" "/etc/netns/$h/hosts"
        echo "$h" >>"$STATE/hosts"
    done
    # Every host reaches the others before anyone uses the cluster: a TCP
    # connection to a closed port is refused at once by a host that is
    # reachable, and times out otherwise.
    for i in $(seq 2 "$n"); do
        reachable "${PREFIX}1" "$SUBNET.$((10 + i))" || die "${PREFIX}1 cannot reach $PREFIX$i"
    done
    trap - EXIT
    echo "cluster: $n hosts up: $(hosts | tr '\n' ' ')(subnet $SUBNET.0/$MASK)"
}

# Whether HOST reaches ADDRESS (refused on port 9 = reachable).
reachable() {
    local out
    out=$(ip netns exec "$1" timeout 2 bash -c "exec 3<>/dev/tcp/$2/9" 2>&1) && return 0
    [[ $out == *refused* ]]
}

# Run a command on a host: in its network namespace, in a UTS namespace of
# its own whose hostname is the host's name (Open MPI tells nodes apart by
# hostname: shared memory within a host, TCP between hosts).
on_host() {
    local h=$1
    shift
    check_host "$h"
    exec ip netns exec "$h" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$h" "$@"
}

slots() {
    local h
    for h in $(hosts); do
        echo "$h slots=${RUDA_CLUSTER_SLOTS:-2}"
    done
}

run_mpirun() {
    [ -s "$STATE/hosts" ] || die "no cluster (run: scripts/cluster.sh up)"
    slots >"$STATE/hostfile"
    local first
    first=$(hosts | head -n 1)
    on_host "$first" mpirun --allow-run-as-root \
        --hostfile "$STATE/hostfile" \
        --mca plm_rsh_agent "$HERE/cluster-agent.sh" \
        --mca plm_rsh_no_tree_spawn 1 \
        --mca btl tcp,vader,self \
        --mca btl_tcp_if_include "$SUBNET.0/$MASK" \
        --mca oob_tcp_if_include "$SUBNET.0/$MASK" \
        --mca mpi_yield_when_idle 1 \
        --mca oob_tcp_keepalive_time 2 \
        --mca oob_tcp_keepalive_intvl 1 \
        --mca oob_tcp_keepalive_probes 3 \
        "$@"
}

link() {
    local h=$1 state=$2
    check_host "$h"
    case $state in
        up | down) ;;
        *) die "link takes up or down, not $state" ;;
    esac
    ip -n "$SWITCH" link set "rs$(host_index "$h")" "$state"
}

stall() {
    local h=$1 ms=$2
    check_host "$h"
    [[ $ms =~ ^[0-9]+$ ]] || die "stall takes milliseconds, not $ms"
    local pids
    pids=$(ip netns pids "$h" | tr "\n" " ")
    [ -n "$pids" ] || die "nothing runs on $h"
    # The host runs again whatever happens to this script.
    # shellcheck disable=SC2064,SC2086
    trap "kill -CONT $pids 2>/dev/null || true" EXIT INT TERM
    # shellcheck disable=SC2086
    kill -STOP $pids
    sleep "$(awk "BEGIN { print $ms / 1000 }")"
    # shellcheck disable=SC2086
    kill -CONT $pids
}

loss() {
    local h=$1 pct=$2
    check_host "$h"
    [[ $pct =~ ^[0-9]+$ ]] && [ "$pct" -le 100 ] || die "loss takes a percentage, not $pct"
    ip netns exec "$h" nft delete table inet ruda_loss 2>/dev/null || true
    if [ "$pct" -gt 0 ]; then
        ip netns exec "$h" nft -f - <<EOF
table inet ruda_loss {
    chain input {
        type filter hook input priority 0; policy accept;
        iifname "eth0" numgen random mod 100 < $pct counter drop
    }
}
EOF
    fi
}

# How many packets the loss rule of HOST dropped (0 without one).
dropped() {
    local h=$1
    check_host "$h"
    ip netns exec "$h" nft list table inet ruda_loss 2>/dev/null |
        awk '/counter packets/ { for (i = 1; i < NF; i++) if ($i == "packets") { print $(i + 1); found = 1 } } END { if (!found) print 0 }'
}

shape() {
    local h=$1 rate=$2
    check_host "$h"
    ip -n "$h" link show eth0 >/dev/null
    ip netns exec "$h" tc qdisc del dev eth0 root 2>/dev/null || true
    if [ "$rate" != off ]; then
        ip netns exec "$h" tc qdisc add dev eth0 root tbf rate "$rate" burst 1mb latency 10ms
    fi
}

status() {
    local h
    if [ ! -s "$STATE/hosts" ]; then
        echo "cluster: down"
        return
    fi
    for h in $(hosts); do
        local i
        i=$(host_index "$h")
        printf '%s %s.%d link %s\n' "$h" "$SUBNET" $((10 + i)) \
            "$(ip -n "$SWITCH" -br link show "rs$i" | awk '{print $2}')"
    done
}

cmd=${1:-}
shift || true
case $cmd in
    up | down | status | mpirun | exec | link | stall | loss | dropped | shape | slots) as_root "$cmd" "$@" ;;
esac
case $cmd in
    up) up "$@" ;;
    down) down; echo "cluster: down" ;;
    status) status ;;
    mpirun) run_mpirun "$@" ;;
    exec) [ $# -ge 2 ] || die "exec HOST CMD..."; on_host "$@" ;;
    link) [ $# -eq 2 ] || die "link HOST up|down"; link "$@" ;;
    stall) [ $# -eq 2 ] || die "stall HOST MS"; stall "$@" ;;
    loss) [ $# -eq 2 ] || die "loss HOST PCT"; loss "$@" ;;
    dropped) [ $# -eq 1 ] || die "dropped HOST"; dropped "$@" ;;
    shape) [ $# -eq 2 ] || die "shape HOST RATE|off"; shape "$@" ;;
    slots) slots ;;
    *) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; [ -z "$cmd" ] || exit 2 ;;
esac
