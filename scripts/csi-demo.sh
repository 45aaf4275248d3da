#!/usr/bin/env bash
# The plugin-level demo: start the built-in hostpath CSI plugin and drive a whole
# volume lifecycle through it with `csi-agent csi`, showing the real mounts.
#
#   create -> controller publish -> node stage -> node publish -> write a file
#   -> node unpublish -> node unstage -> controller unpublish -> delete
#
# Usage: scripts/csi-demo.sh [BIN]   (as root: staging and publishing mount)
set -euo pipefail

bin=$(realpath "${1:-target/debug/csi-agent}")
if [ "$(id -u)" -ne 0 ]; then
    echo "error: the demo mounts volumes: run it as root" >&2
    exit 1
fi

dir=$(mktemp -d /tmp/csi-agent-demo.XXXXXX)
socket="$dir/csi.sock"
plugin_pid=""
cleanup() {
    [ -n "$plugin_pid" ] && kill "$plugin_pid" 2>/dev/null && wait "$plugin_pid" 2>/dev/null || true
    # Only reached with mounts left if a step failed.
    grep -o " $dir[^ ]*" /proc/self/mountinfo | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT

show() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }
step() { show "$@"; "$@"; }
# Shown as `csi-agent csi ...` (the endpoint flag is left out for brevity).
csi() { show csi-agent csi "$@"; "$bin" csi -endpoint "unix://$socket" "$@"; }

echo "starting the hostpath plugin on $socket"
"$bin" hostpath -endpoint "unix://$socket" -base-dir "$dir/base" -node-id demo-node 2>"$dir/plugin.log" &
plugin_pid=$!
for _ in $(seq 100); do [ -S "$socket" ] && break; sleep 0.05; done
[ -S "$socket" ] || { echo "error: the plugin did not start:" >&2; cat "$dir/plugin.log" >&2; exit 1; }

cap=single-node-writer,file-system
csi identity info
csi node info
csi controller create demo -cap "$cap" -size 1GiB
show csi-agent csi controller publish demo -node demo-node -cap "$cap"
context=$("$bin" csi -endpoint "unix://$socket" controller publish demo -node demo-node -cap "$cap")
echo "$context"

mkdir -p "$dir/staging/demo" "$dir/per-alloc/alloc1"
csi node stage demo -staging "$dir/staging/demo" -cap "$cap" -publish-context "$context"
csi node publish demo -staging "$dir/staging/demo" -target "$dir/per-alloc/alloc1/demo" -cap "$cap" -publish-context "$context"

printf '\n\033[1mthe mounts, from /proc/self/mountinfo:\033[0m\n'
grep " $dir" /proc/self/mountinfo | awk '{print "  " $5 "  <-  " $4}'

step sh -c "echo 'hello from csi-agent' > $dir/per-alloc/alloc1/demo/hello.txt"
step cat "$dir/base/volumes/demo/hello.txt"
csi node stats demo -path "$dir/per-alloc/alloc1/demo"

csi node unpublish demo -target "$dir/per-alloc/alloc1/demo"
csi node unstage demo -staging "$dir/staging/demo"
csi controller unpublish demo -node demo-node
csi controller delete demo

left=$(grep -c " $dir" /proc/self/mountinfo || true)
printf '\nmounts left under %s: %s\n' "$dir" "$left"
[ "$left" -eq 0 ]
echo "demo complete"
