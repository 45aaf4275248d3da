#!/usr/bin/env bash
# The many-hosts demo (`make cluster-demo`, as root): three hosts on one
# machine, each a network namespace linked to a bridge, a 3-member etcd on
# the bridge, and on each host a csi-agent with a hostpath plugin (the three
# plugins share one base dir, as hosts share a storage backend). It shows
# `node status` from every host, then creates a single-writer volume and
# claims it from the three hosts at once: one must win, and the other two
# must be refused, naming the holder. It says what happened, and exits 1
# unless exactly that happened.
#
# Processes join a host's network namespace only (nsenter --net), so their
# mounts are the machine's and the control sockets are paths anyone can
# reach. Everything (processes, namespaces, links, mounts, the temporary
# directory) is removed on exit, also after a failure or Ctrl-C.
#
# Usage: scripts/cluster-demo.sh [BIN]   (default target/debug/csi-agent)
set -Eeuo pipefail

bin=${1:-target/debug/csi-agent}
hosts=(host-a host-b host-c)
lease_ttl=5s

fail() {
    trap - ERR
    echo "cluster-demo: $*" >&2
    exit 1
}

[ "$(id -u)" -eq 0 ] || fail "run it as root: it makes network namespaces and mounts"
[ -x "$bin" ] || fail "no executable csi-agent at $bin (run 'make build')"
for tool in ip nsenter etcd; do
    command -v "$tool" >/dev/null || fail "$tool is not installed ('make deps' installs iproute2, util-linux and etcd-server)"
done
bin=$(realpath "$bin")

dir=$(mktemp -d /tmp/csi-agent-cluster-demo.XXXXXX)
# Names of this run: interface names have at most 15 bytes.
bridge="csd$$"
netns_of() { echo "csi-agent-demo-$$-$1"; }
# The agents, stopped first (while etcd is up, so they leave the cluster
# cleanly), then everything else started here: the plugins and etcd.
agent_pids=()
pids=()
# Whether a failure shows the logs: not once the claims' outcome is known.
show_logs=1

# Mount points under the temporary directory, deepest first.
mounts_under() {
    awk -v d="$1" '$5 == d || index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r
}

# `stop PID...`: SIGTERM, up to 10 s to exit, then SIGKILL.
stop() {
    [ "$#" -gt 0 ] || return 0
    kill -TERM "$@" 2>/dev/null
    for _ in $(seq 100); do
        kill -0 "$@" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$@" 2>/dev/null
    wait "$@" 2>/dev/null
}

cleanup() {
    local status=$?
    set +e
    trap - ERR
    stop "${agent_pids[@]}"
    stop "${pids[@]}"
    if [ "$status" -ne 0 ] && [ "$show_logs" -eq 1 ]; then
        for log in "$dir"/*.log "$dir"/*/*.log; do
            [ -s "$log" ] || continue
            echo "---- $log (last 20 lines) ----" >&2
            tail -n 20 "$log" >&2
        done
    fi
    for i in "${!hosts[@]}"; do
        local netns
        netns=$(netns_of "${hosts[$i]}")
        [ -e "/run/netns/$netns" ] || continue
        # Whatever still runs on the host was started here.
        ip netns pids "$netns" | xargs -r kill -KILL
        ip link del "$bridge-$i" 2>/dev/null
        ip netns del "$netns"
    done
    ip link del "$bridge" 2>/dev/null
    for mount in $(mounts_under "$dir"); do
        umount -l "$mount"
    done
    if [ -z "$(mounts_under "$dir")" ]; then
        rm -rf --one-file-system "$dir"
    else
        echo "cluster-demo: mounts are still under $dir; it is left in place" >&2
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# A failed command names itself; subshells inherit the trap (set -E), and
# only the script's own shell reports.
trap '[ "$BASHPID" != "$$" ] || echo "cluster-demo: line $LINENO: $BASH_COMMAND failed" >&2' ERR

title() {
    if [ -t 1 ]; then
        printf '\n\033[1m==> %s\033[0m\n' "$*"
    else
        printf '\n==> %s\n' "$*"
    fi
}

# `on HOST CMD...`: runs CMD in HOST's network namespace, showing it.
on() {
    local host=$1
    shift
    printf '%s$ %s\n' "$host" "$*"
    nsenter --net="/run/netns/$(netns_of "$host")" "$@"
}

# `wait_until SECONDS CMD...`: runs CMD every 0.2 s until it succeeds.
wait_until() {
    local deadline=$((SECONDS + $1))
    shift
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.2
    done
}

# `cli HOST ARGS...`: the CLI of HOST's agent, run on HOST.
cli() {
    local host=$1
    shift
    nsenter --net="/run/netns/$(netns_of "$host")" \
        env CSI_AGENT_ADDR="unix://$dir/$host/data/control.sock" "$bin" "$@"
}

# `show_cli HOST ARGS...`: the same, shown as typed on HOST.
show_cli() {
    printf '%s$ csi-agent %s\n' "$1" "${*:2}"
    cli "$@"
}

# A /24 in 10.254.0.0/16 that no route of this machine covers or splits.
free_subnet() {
    local n candidate
    for n in $(seq 0 255); do
        candidate="10.254.$(((n + $$) % 256))"
        if [ -z "$(ip -4 route show table all match "$candidate.0/24" | grep -v '^default')" ] &&
            [ -z "$(ip -4 route show table all root "$candidate.0/24")" ]; then
            echo "$candidate"
            return
        fi
    done
    fail "no /24 in 10.254.0.0/16 is free of this machine's routes"
}

title "three hosts: a bridge and three network namespaces"
subnet=$(free_subnet)
ip link add "$bridge" type bridge
ip addr add "$subnet.1/24" dev "$bridge"
ip link set "$bridge" up
for i in "${!hosts[@]}"; do
    host=${hosts[$i]}
    netns=$(netns_of "$host")
    ip netns add "$netns"
    ip link add "$bridge-$i" type veth peer name eth0 netns "$netns"
    ip link set "$bridge-$i" master "$bridge" up
    ip -n "$netns" addr add "$subnet.$((i + 2))/24" dev eth0
    ip -n "$netns" link set eth0 up
    ip -n "$netns" link set lo up
    echo "$host: namespace $netns, address $subnet.$((i + 2)), bridge $bridge at $subnet.1"
done

title "etcd: three members on the bridge, $subnet.1"
endpoints=()
initial=()
for i in 0 1 2; do
    endpoints+=("http://$subnet.1:$((12379 + 2 * i))")
    initial+=("m$i=http://$subnet.1:$((12380 + 2 * i))")
done
for i in 0 1 2; do
    etcd --name "m$i" --data-dir "$dir/etcd/m$i" \
        --listen-client-urls "${endpoints[$i]}" --advertise-client-urls "${endpoints[$i]}" \
        --listen-peer-urls "http://$subnet.1:$((12380 + 2 * i))" \
        --initial-advertise-peer-urls "http://$subnet.1:$((12380 + 2 * i))" \
        --initial-cluster "$(
            IFS=,
            echo "${initial[*]}"
        )" \
        --initial-cluster-state new --initial-cluster-token "csi-agent-demo-$$" \
        >/dev/null 2>"$dir/etcd-m$i.log" &
    pids+=($!)
done
# /health says true once the member has a leader. (A subshell: bash's
# /dev/tcp needs no curl, and a refused connection stays in here.)
healthy() (
    exec 3<>"/dev/tcp/$subnet.1/$1" || exit 1
    printf 'GET /health HTTP/1.0\r\n\r\n' >&3
    reply=$(timeout 2 cat <&3)
    [[ $reply == *'"health":"true"'* ]]
)
for i in 0 1 2; do
    wait_until 30 healthy $((12379 + 2 * i)) || fail "etcd member m$i is not healthy after 30 s"
done
echo "etcd: ${endpoints[*]}"

title "on each host: a hostpath plugin and an agent (base dir $dir/hostpath, shared)"
etcd_list=$(printf '"%s", ' "${endpoints[@]}")
for host in "${hosts[@]}"; do
    mkdir -p "$dir/$host"
    on "$host" "$bin" hostpath -endpoint "unix://$dir/$host/csi.sock" \
        -base-dir "$dir/hostpath" -shared -node-id "$host" 2>"$dir/$host/plugin.log" &
    pids+=($!)
    cat >"$dir/$host/agent.hcl" <<EOF
data_dir         = "$dir/$host/data"
node_name        = "$host"
plugin_heartbeat = "1s"

plugin "hostpath" {
  socket = "unix://$dir/$host/csi.sock"
  type   = "monolith"
}

cluster {
  etcd      = [${etcd_list%, }]
  lease_ttl = "$lease_ttl"
}
EOF
    on "$host" "$bin" agent -config "$dir/$host/agent.hcl" 2>"$dir/$host/agent.log" &
    agent_pids+=($!)
done
lists_all() {
    local out host
    out=$(cli "$1" node status) || return 1
    for host in "${hosts[@]}"; do
        grep -q "^$host " <<<"$out" || return 1
    done
}
plugin_healthy() { cli "$1" plugin status -json hostpath | grep -q '"health": "HEALTHY"'; }
for host in "${hosts[@]}"; do
    wait_until 60 plugin_healthy "$host" ||
        fail "$host's hostpath plugin is not healthy after 60 s: $(cli "$host" plugin status hostpath 2>&1)"
    wait_until 60 lists_all "$host" ||
        fail "$host's node status does not list the three hosts after 60 s: $(cli "$host" node status 2>&1)"
done

title "node status, from each host"
for host in "${hosts[@]}"; do
    show_cli "$host" node status
    echo
done

title "a single-writer volume, created on host-a"
cat >"$dir/data.hcl" <<'EOF'
id           = "data"
name         = "data"
type         = "csi"
plugin_id    = "hostpath"
capacity_min = "1MiB"

capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
EOF
show_cli host-a volume create "$dir/data.hcl"
# Every host learns the volume from its watch of etcd.
for host in "${hosts[@]}"; do
    for _ in $(seq 100); do
        cli "$host" volume status data >/dev/null 2>&1 && break
        sleep 0.1
    done
    cli "$host" volume status data >/dev/null 2>&1 || fail "$host never learnt volume data"
done

title "the three hosts claim it at the same moment"
claims=()
for host in "${hosts[@]}"; do
    echo "$host$ csi-agent volume claim -alloc web-$host -target $dir/$host/mnt data"
    cli "$host" volume claim -alloc "web-$host" -target "$dir/$host/mnt" data \
        >"$dir/$host/claim.out" 2>&1 &
    claims[$!]=$host
done
winners=()
refused=()
for pid in "${!claims[@]}"; do
    host=${claims[$pid]}
    if wait "$pid"; then
        winners+=("$host")
    else
        refused+=("$host")
    fi
done
echo
for host in "${hosts[@]}"; do
    if [[ " ${winners[*]} " == *" $host "* ]]; then
        printf '%s: claimed: %s\n' "$host" "$(tr '\n' ' ' <"$dir/$host/claim.out")"
    else
        printf '%s: refused: %s\n' "$host" "$(tr '\n' ' ' <"$dir/$host/claim.out")"
    fi
done

verdict=0
show_logs=0
echo
if [ "${#winners[@]}" -gt 1 ]; then
    echo "NOT EXCLUSIVE: ${#winners[@]} hosts (${winners[*]}) hold a write claim on the single-writer volume"
    verdict=1
elif [ "${#winners[@]}" -eq 0 ]; then
    echo "no host won the claim"
    verdict=1
else
    holder=${winners[0]}
    unnamed=()
    for host in "${refused[@]}"; do
        grep -q "$holder" "$dir/$host/claim.out" || unnamed+=("$host")
    done
    if [ "${#unnamed[@]}" -eq 0 ]; then
        echo "exclusive: $holder holds the write claim; ${refused[*]} were refused, naming $holder"
        title "$holder writes through its mount"
        on "$holder" sh -c "echo 'written on $holder' > $dir/$holder/mnt/hello.txt"
        cat "$dir/$holder/mnt/hello.txt"
        other=host-a
        [ "$holder" = host-a ] && other=host-b
        title "$other sees the claim and its node"
        show_cli "$other" volume status data
    else
        echo "exclusivity NOT shown: $holder won, but the refusals of ${unnamed[*]} do not name it"
        verdict=1
    fi
fi

title "release"
for host in "${winners[@]}"; do
    show_cli "$host" volume release -alloc "web-$host" data
done
left=$(mounts_under "$dir" | wc -l)
echo "mounts left under $dir: $left"
if [ "$verdict" -ne 0 ]; then
    echo "cluster demo: exclusivity was not shown (see above)"
    exit 1
fi
[ "$left" -eq 0 ] || fail "mounts are left under $dir after the release"
echo "cluster demo complete"
