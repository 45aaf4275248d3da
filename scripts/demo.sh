#!/usr/bin/env bash
# The README demo: `csi-agent agent -dev` runs the agent with the built-in
# hostpath plugin and a volume `demo`; a newcomer claims it with -target,
# writes a file through it, and releases it. Every mount is real.
#
# Usage: scripts/demo.sh [BIN]   (as root: claims mount)
set -euo pipefail

bin=$(realpath "${1:-target/debug/csi-agent}")
if [ "$(id -u)" -ne 0 ]; then
    echo "error: the demo mounts volumes: run it as root" >&2
    exit 1
fi

dir=$(mktemp -d /tmp/csi-agent-demo.XXXXXX)
agent_pid=""
cleanup() {
    if [ -n "$agent_pid" ] && kill "$agent_pid" 2>/dev/null; then
        wait "$agent_pid" 2>/dev/null || true
    fi
    # Only reached with mounts left if a step failed.
    grep -o " $dir[^ ]*" /proc/self/mountinfo | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT

show() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }
step() { show "$@"; "$@"; }
agent() { show csi-agent "$@"; "$bin" "$@"; }

export CSI_AGENT_ADDR="unix://$dir/data/control.sock"
show "csi-agent agent -dev &"
"$bin" agent -dev -data-dir "$dir/data" 2>"$dir/agent.log" &
agent_pid=$!
for _ in $(seq 200); do
    "$bin" volume status demo >/dev/null 2>&1 && break
    sleep 0.05
done
"$bin" volume status demo >/dev/null || { cat "$dir/agent.log" >&2; exit 1; }

agent plugin status
agent volume status
agent volume claim demo -alloc hello -target "$dir/mnt"
step sh -c "echo 'hello from csi-agent' > $dir/mnt/hello.txt"
agent volume status demo

printf '\n\033[1mthe mounts, from /proc/self/mountinfo:\033[0m\n'
grep " $dir" /proc/self/mountinfo | awk '{print "  " $5 "  <-  " $4}'

agent volume release demo -alloc hello
step cat "$dir/data/hostpath/volumes/demo/hello.txt"

show "kill -TERM \$agent_pid"
kill -TERM "$agent_pid"
wait "$agent_pid"
agent_pid=""
left=$(grep -c " $dir" /proc/self/mountinfo || true)
printf '\nmounts left under %s: %s\n' "$dir" "$left"
[ "$left" -eq 0 ]
echo "demo complete"
