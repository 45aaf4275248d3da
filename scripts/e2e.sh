#!/usr/bin/env bash
# End to end, as root, against one csi-agent binary: the built-in hostpath
# plugin runs as its own process, an agent runs from a config file that
# declares it, and the CLI registers, creates, claims (with real bind mounts
# at -target), releases, runs a job whose task mounts a volume, stops it,
# deregisters and deletes volumes through the agent.
# The agent is stopped with SIGTERM and must exit 0, leaving no mount and no
# socket behind. Everything lives in one temporary directory.
#
# Usage: scripts/e2e.sh                 (make e2e; tests target/debug/csi-agent)
#        BIN=PATH scripts/e2e.sh        (tests another binary, e.g. the static one)
# A failure names its step and exits 1; the agent's and plugin's logs follow.
set -Eeuo pipefail

bin=${BIN:-target/debug/csi-agent}
script_name=e2e
# shellcheck source=steps.sh
. "$(dirname "$0")/steps.sh"

[ "$(id -u)" -eq 0 ] || fail "run it as root: claims bind-mount volumes"
[ -x "$bin" ] || fail "no executable csi-agent at $bin (run 'make build', or set BIN)"
bin=$(realpath "$bin")

dir=$(mktemp -d /tmp/csi-agent-e2e.XXXXXX)
agent_pid=""
plugin_pid=""

cleanup() {
    status=$?
    for pid in $agent_pid $plugin_pid; do
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    if [ "$status" -ne 0 ]; then
        for log in agent plugin; do
            if [ -s "$dir/$log.log" ]; then
                echo "---- $log log (last 40 lines) ----" >&2
                tail -n 40 "$dir/$log.log" >&2
            fi
        done
    fi
    # Mounts are only left here when a step failed.
    for mount in $(mounts_under "$dir"); do
        umount -l "$mount" 2>/dev/null || true
    done
    if [ -z "$(mounts_under "$dir")" ]; then
        rm -rf --one-file-system "$dir"
    else
        echo "e2e: mounts are still under $dir; it is left in place" >&2
    fi
}
trap cleanup EXIT

# `stopped PID`: the process has exited (a zombie counts: it is our child).
stopped() {
    [ ! -e "/proc/$1" ] || [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" = Z ]
}

# `stop NAME PID`: SIGTERM, then the exit status, which must be 0.
stop() {
    local code=0
    kill -TERM "$2"
    wait_until 30 stopped "$2" || fail "$1 (pid $2) did not exit within 30 s of SIGTERM"
    wait "$2" || code=$?
    [ "$code" -eq 0 ] || fail "$1 exited with status $code after SIGTERM, expected 0"
}

cli() { "$bin" "$@"; }

# `expect_in TEXT CMD...`: CMD succeeds and its output contains TEXT.
expect_in() {
    local want=$1 out
    shift
    out=$("$@") || fail "'$*' failed: $out"
    printf '%s\n' "$out"
    case "$out" in
    *"$want"*) ;;
    *) fail "'$*' does not say '$want'; it says: $out" ;;
    esac
}

# Paths. The plugin's socket is short and outside the data dir: it runs on
# its own, as a plugin started by systemd would.
plugin_sock="$dir/plugin/csi.sock"
base="$dir/hostpath"
data="$dir/data"
mnt="$dir/mnt"
export CSI_AGENT_ADDR="unix://$data/control.sock"

step "version"
cli version

step "start the hostpath plugin"
mkdir -p "$dir/plugin"
"$bin" hostpath -endpoint "unix://$plugin_sock" -base-dir "$base" -node-id e2e-node \
    >"$dir/plugin.log" 2>&1 &
plugin_pid=$!
wait_until 30 test -S "$plugin_sock" || fail "no plugin socket at $plugin_sock after 30 s"

step "write and validate the agent config"
cat >"$dir/agent.hcl" <<EOF
# Written by scripts/e2e.sh.
data_dir         = "$data"
node_name        = "e2e-node"
log_level        = "debug"
plugin_heartbeat = "5s"

plugin "hostpath" {
  socket         = "unix://$plugin_sock"
  type           = "monolith"
  health_timeout = "30s"
}
EOF
cli validate "$dir/agent.hcl"

step "start the agent"
"$bin" agent -config "$dir/agent.hcl" >"$dir/agent.log" 2>&1 &
agent_pid=$!
wait_until 30 cli plugin status || fail "the agent did not answer on $data/control.sock within 30 s"

step "plugin status: hostpath healthy"
healthy() { cli plugin status -json hostpath | grep -q '"health": "HEALTHY"'; }
wait_until 30 healthy || fail "plugin hostpath is not healthy after 30 s: $(cli plugin status hostpath 2>&1)"
cli plugin status
expect_in "Nodes Healthy        = 1" cli plugin status hostpath

step "volume create"
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
expect_in 'Volume "data" created' cli volume create "$dir/data.hcl"
[ -d "$base/volumes/data" ] || fail "the plugin has no directory for volume data in $base/volumes"

step "volume register"
# A volume that exists on the storage side before the agent hears of it:
# made by hand on the plugin, as an operator would, then registered.
cli csi -endpoint "unix://$plugin_sock" controller create shared -cap single-node-writer,file-system
echo "seeded before registration" >"$base/volumes/shared/seed.txt"
cat >"$dir/shared.hcl" <<'EOF'
id          = "shared-data"
name        = "shared-data"
type        = "csi"
plugin_id   = "hostpath"
external_id = "shared"

capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}

capability {
  access_mode     = "single-node-reader-only"
  attachment_mode = "file-system"
}
EOF
expect_in 'Volume "shared-data" registered' cli volume register "$dir/shared.hcl"
expect_in "shared-data" cli volume status

step "volume claim -target"
cli volume claim data -alloc e2e-alloc -target "$mnt/data"
cli volume claim shared-data -alloc e2e-alloc -read-only -target "$mnt/shared"
mountpoint -q "$mnt/data" || fail "$mnt/data is not a mount point"
mountpoint -q "$mnt/shared" || fail "$mnt/shared is not a mount point"
expect_in "e2e-alloc" cli volume status data

step "write and read through the targets"
token="written through the bind mount at $(date +%s.%N)"
echo "$token" >"$mnt/data/e2e.txt"
[ "$(cat "$mnt/data/e2e.txt")" = "$token" ] || fail "read back something else from $mnt/data/e2e.txt"
[ "$(cat "$base/volumes/data/e2e.txt" 2>/dev/null)" = "$token" ] ||
    fail "the file written at $mnt/data is not in the plugin's volume directory $base/volumes/data"
[ "$(cat "$mnt/shared/seed.txt")" = "seeded before registration" ] ||
    fail "the registered volume's file is not visible at $mnt/shared"
if (echo "no" >"$mnt/shared/refused.txt") 2>/dev/null; then
    fail "a write through the read-only claim at $mnt/shared succeeded"
fi

step "volume release"
expect_in "released" cli volume release data -alloc e2e-alloc
expect_in "released" cli volume release shared-data -alloc e2e-alloc
! mountpoint -q "$mnt/data" || fail "$mnt/data is still mounted after release"
! mountpoint -q "$mnt/shared" || fail "$mnt/shared is still mounted after release"
[ -z "$(mounts_under "$data")" ] || fail "mounts left under the data dir: $(mounts_under "$data")"
[ "$(cat "$base/volumes/data/e2e.txt")" = "$token" ] || fail "the data did not outlive the claim"

step "job run: a task writes through a volume_mount"
cat >"$dir/app.hcl" <<'EOF'
job "e2e-app" {
  group "app" {
    volume "data" {
      type            = "csi"
      source          = "data"
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }
    task "writer" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo \"from alloc $NOMAD_ALLOC_ID\" > /data/job.txt && echo done && exec sleep 600"]
      }
      volume_mount {
        volume      = "data"
        destination = "/data"
      }
    }
  }
}
EOF
cli validate "$dir/app.hcl"
alloc=$(cli job run "$dir/app.hcl" | awk '$1 == "alloc" { print $2 }')
[ -n "$alloc" ] || fail "job run printed no alloc ID"
job_wrote() { [ "$(cat "$base/volumes/data/job.txt" 2>/dev/null)" = "from alloc $alloc" ]; }
wait_until 30 job_wrote || fail "the task did not write job.txt into the volume: $(cli job status e2e-app 2>&1)"
expect_in "running" cli job status e2e-app
expect_in "done" cli alloc logs "$alloc" writer

step "job stop: the claim is released and nothing stays mounted"
expect_in "stopping 1 allocation" cli job stop e2e-app
job_dead() { cli job status e2e-app | grep -q "^Status *= dead"; }
wait_until 30 job_dead || fail "job e2e-app did not stop: $(cli job status e2e-app 2>&1)"
claim_gone() { ! cli volume status data | grep -q "$alloc"; }
wait_until 30 claim_gone || fail "the claim of alloc $alloc is still there: $(cli volume status data 2>&1)"
no_mounts() { [ -z "$(mounts_under "$data")" ]; }
wait_until 30 no_mounts || fail "mounts left under the data dir: $(mounts_under "$data")"

step "volume deregister and delete"
expect_in "deregistered" cli volume deregister shared-data
[ -f "$base/volumes/shared/seed.txt" ] || fail "deregister removed the volume's data; it must only forget it"
expect_in "deleted" cli volume delete data
[ ! -e "$base/volumes/data" ] || fail "volume delete left $base/volumes/data behind"
expect_in "No volumes registered" cli volume status

step "stop the agent with SIGTERM"
stop agent "$agent_pid"
agent_pid=""

step "stop the plugin with SIGTERM"
stop "hostpath plugin" "$plugin_pid"
plugin_pid=""

step "nothing left behind"
left=$(mounts_under "$dir")
[ -z "$left" ] || fail "mounts left under $dir: $left"
sockets=$(find "$dir" -type s)
[ -z "$sockets" ] || fail "sockets left behind: $sockets"

current_step="done"
echo "e2e: all steps passed ($bin)"
