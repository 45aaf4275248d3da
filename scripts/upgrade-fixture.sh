#!/usr/bin/env bash
# Writes an upgrade fixture: data dirs as one csi-agent binary leaves them,
# for later binaries to start on (tests/integration/upgrade.rs). Run it as
# root with the binary whose format is to be kept, once per format: see
# "Upgrade fixtures" in docs/development.md.
#
# A user's setup, through the CLI only: an agent whose config gives the
# built-in hostpath plugin, run as a `csi_plugin` job task, its binary and
# its base dir as host volumes; two volumes created and one registered; a
# job whose exec task holds two claims through `volume_mount`s and writes
# into one; two claims made with `volume claim`, one bind-mounted at a host
# target and written through. The scenario runs twice, and each run ends
# in its own way:
#
#   stopped  SIGTERM, as `systemctl stop` sends it: the agent writes a last
#            snapshot (plugins marked unhealthy) and empties the journal.
#            This is the upgrade: the operator stops the old agent, installs
#            the new binary, starts it.
#   killed   SIGKILL right after the last claim: the journal keeps records
#            the snapshot does not have (the claims made by hand), and the
#            snapshot still calls the plugin healthy. A crash, an OOM kill
#            or a power cut, followed by the new binary.
#
# Both then "reboot": every task is killed and every mount under the run's
# root unmounted, so the new binary has to claim and start everything
# again from the records; the files stay, as a host's disk keeps them. A
# fixture cannot keep the processes or mounts of the old binary, so the
# case without a reboot (tasks and mounts still there) is not one of them.
# What the agent and the plugin read back is then copied to OUT/<ending>.
#
# The agent's records hold absolute paths (the data dir in the plugin's
# socket path, a claim's host target, the job files' names), so each
# fixture is made, and must be used, at one fixed path:
# /tmp/csi-agent-upgrade-fixture-<version>-<ending>. The script refuses to
# run when one exists.
#
# Usage: scripts/upgrade-fixture.sh                (make upgrade-fixture)
#        FIXTURE_VERSION=v2 BIN=PATH scripts/upgrade-fixture.sh
#        (writes tests/fixtures/datadir-$FIXTURE_VERSION; OUT=DIR writes
#        elsewhere, with the same roots)
set -Eeuo pipefail

bin=${BIN:-target/debug/csi-agent}
version=${FIXTURE_VERSION:-v1}
out=${OUT:-tests/fixtures/datadir-$version}
endings="stopped killed"
root=""
agent_pid=""

script_name=upgrade-fixture
# shellcheck source=steps.sh
. "$(dirname "$0")/steps.sh"

[ "$(id -u)" -eq 0 ] || fail "run it as root: claims mount volumes"
[ -x "$bin" ] || fail "no executable csi-agent at $bin (run 'make build', or set BIN)"
bin=$(realpath "$bin")
# The jobs run it as /opt/csi-agent/csi-agent, from a host volume of its
# directory.
[ "$(basename "$bin")" = csi-agent ] || fail "the binary must be named csi-agent, not $(basename "$bin")"
[ ! -e "$out" ] || fail "$out exists: a fixture is never rewritten; pick a new FIXTURE_VERSION"
for ending in $endings; do
    dir="/tmp/csi-agent-upgrade-fixture-$version-$ending"
    [ ! -e "$dir" ] || fail "$dir exists; remove it (nothing may be mounted under it) and run again"
done

# Pids of the processes whose task dir is under the root: the jobs' tasks,
# which run in sessions of their own and outlive the agent.
task_pids() {
    local environ pid
    for environ in /proc/[0-9]*/environ; do
        pid=${environ#/proc/}
        pid=${pid%/environ}
        # A process may exit while we look: it is then no task of ours.
        if { tr '\0' '\n' <"$environ"; } 2>/dev/null | grep -q "^CSI_AGENT_TASK_DIR=$root/"; then
            echo "$pid"
        fi
    done
}

# The reboot: the agent, the tasks and the mounts go; files stay.
reboot() {
    local pid mount
    [ -n "$root" ] || return 0
    for pid in $agent_pid $(task_pids); do
        kill -KILL "$pid" 2>/dev/null || true
    done
    [ -z "$agent_pid" ] || wait "$agent_pid" 2>/dev/null || true
    agent_pid=""
    for pid in $(task_pids); do
        while [ -e "/proc/$pid" ]; do sleep 0.05; done
    done
    for mount in $(mounts_under "$root"); do
        umount -l "$mount" 2>/dev/null || true
    done
}

# Removes the run's root, unless something is still mounted under it.
remove_root() {
    [ -n "$root" ] || return 0
    if [ -z "$(mounts_under "$root")" ]; then
        rm -rf --one-file-system "$root"
    else
        echo "upgrade-fixture: mounts are still under $root; it is left in place" >&2
    fi
}

cleanup() {
    status=$?
    reboot
    if [ "$status" -ne 0 ]; then
        if [ -s "$root/agent.log" ]; then
            echo "---- agent log (last 60 lines) ----" >&2
            tail -n 60 "$root/agent.log" >&2
        fi
        rm -rf "$out"
    fi
    remove_root
}
trap cleanup EXIT

cli() { "$bin" "$@"; }

# `scenario ENDING`: the user's setup at /tmp/csi-agent-upgrade-fixture-
# <version>-ENDING, ended as ENDING says, then the reboot.
scenario() {
    local ending=$1 data backing plugin_alloc app_alloc code
    root="/tmp/csi-agent-upgrade-fixture-$version-$ending"
    data="$root/data"
    backing="$root/backing"
    export CSI_AGENT_ADDR="unix://$data/control.sock"

    step "$ending: write the agent config"
    mkdir -p "$root" "$backing"
    # Keep in step with the config tests/integration/upgrade.rs writes: the
    # data dir, the node name and the host volumes' names.
    cat >"$root/agent.hcl" <<EOF
data_dir         = "$data"
node_name        = "upgrade-node"
plugin_heartbeat = "1s"

host_volume "csi-agent-bin" {
  path      = "$(dirname "$bin")"
  read_only = true
}

host_volume "hostpath-backing" {
  path = "$backing"
}
EOF
    cli validate "$root/agent.hcl"

    step "$ending: start the agent"
    RUST_LOG=debug "$bin" agent -config "$root/agent.hcl" >/dev/null 2>"$root/agent.log" &
    agent_pid=$!
    wait_until 30 cli plugin status || fail "the agent did not answer within 30 s"

    step "$ending: run the plugin job"
    cat >"$root/plugin.hcl" <<'EOF'
job "plugin" {
  group "nodes" {
    restart {
      attempts = 3
      interval = "5m"
      delay    = "1s"
      mode     = "fail"
    }
    volume "bin" {
      type      = "host"
      source    = "csi-agent-bin"
      read_only = true
    }
    volume "backing" {
      type   = "host"
      source = "hostpath-backing"
    }
    task "hostpath" {
      driver = "exec"
      config {
        command = "/opt/csi-agent/csi-agent"
        args    = ["hostpath", "-strict", "-endpoint", "${CSI_ENDPOINT}", "-base-dir", "/backing", "-node-id", "upgrade-node"]
      }
      volume_mount {
        volume      = "bin"
        destination = "/opt/csi-agent"
      }
      volume_mount {
        volume      = "backing"
        destination = "/backing"
      }
      csi_plugin {
        id             = "hp"
        type           = "monolith"
        health_timeout = "30s"
      }
    }
  }
}
EOF
    plugin_alloc=$(cli job run "$root/plugin.hcl" | awk '$1 == "alloc" { print $2 }')
    [ -n "$plugin_alloc" ] || fail "job run printed no alloc ID"
    healthy() { cli plugin status -json hp | grep -q '"health": "HEALTHY"'; }
    wait_until 30 healthy || fail "plugin hp is not healthy after 30 s: $(cli plugin status hp 2>&1)"

    step "$ending: create volumes"
    # v1: the job's writer. Its size, mount flags and parameters are
    # fields the upgrade must keep.
    cat >"$root/v1.hcl" <<'EOF'
id           = "v1"
name         = "app-data"
type         = "csi"
plugin_id    = "hp"
capacity_min = "1MiB"

capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}

mount_options {
  mount_flags = ["noatime"]
}

parameters {
  tier = "fast"
}
EOF
    cli volume create "$root/v1.hcl"
    # v2: claimed by hand, bind-mounted at a host target.
    cat >"$root/v2.hcl" <<'EOF'
id        = "v2"
name      = "backups"
type      = "csi"
plugin_id = "hp"

capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
EOF
    cli volume create "$root/v2.hcl"

    step "$ending: register a volume made on the plugin by hand"
    # v3: a volume that existed before the agent heard of it, read by the
    # job's task and by a claim made by hand.
    cli csi -endpoint "unix://$data/plugins/$plugin_alloc/csi.sock" \
        controller create reference -cap multi-node-reader-only,file-system
    echo "reference data" >"$backing/volumes/reference/README"
    cat >"$root/v3.hcl" <<'EOF'
id          = "v3"
name        = "reference"
type        = "csi"
plugin_id   = "hp"
external_id = "reference"

capability {
  access_mode     = "multi-node-reader-only"
  attachment_mode = "file-system"
}

context {
  origin = "registered"
}
EOF
    cli volume register "$root/v3.hcl"

    step "$ending: run the app job"
    # Each run of the task appends its pid to `runs` in v1: a test reads
    # there that the task ran again after the upgrade, and wrote.
    cat >"$root/app.hcl" <<'EOF'
job "app" {
  group "web" {
    restart {
      attempts = 3
      interval = "5m"
      delay    = "1s"
      mode     = "fail"
    }
    volume "data" {
      type            = "csi"
      source          = "v1"
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }
    volume "reference" {
      type            = "csi"
      source          = "v3"
      read_only       = true
      access_mode     = "multi-node-reader-only"
      attachment_mode = "file-system"
    }
    task "server" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo $$ >> /data/runs && cat /reference/README && exec sleep 1000000"]
      }
      volume_mount {
        volume      = "data"
        destination = "/data"
      }
      volume_mount {
        volume      = "reference"
        destination = "/reference"
      }
    }
  }
}
EOF
    app_alloc=$(cli job run "$root/app.hcl" | awk '$1 == "alloc" { print $2 }')
    [ -n "$app_alloc" ] || fail "job run printed no alloc ID"
    # The plugin names a created volume's directory after the spec's name.
    task_ran() { [ -s "$backing/volumes/app-data/runs" ]; }
    wait_until 30 task_ran || fail "the app task never wrote runs: $(cli job status app 2>&1)"

    step "$ending: claim by hand"
    cli volume claim -alloc backup-1 -target "$root/mnt/backups" v2
    cli volume claim -alloc reader-1 -read-only v3
    mountpoint -q "$root/mnt/backups" || fail "$root/mnt/backups is not a mount point"
    # Data written through the target: the volume's directory is not
    # empty, so that git keeps it in the fixture.
    echo "written through the host target" >"$root/mnt/backups/latest"
    [ -s "$backing/volumes/backups/latest" ] || fail "the write at the target did not reach the plugin's directory"

    case $ending in
    stopped)
        step "$ending: stop the agent with SIGTERM"
        kill -TERM "$agent_pid"
        code=0
        wait "$agent_pid" || code=$?
        agent_pid=""
        [ "$code" -eq 0 ] || fail "the agent exited with status $code after SIGTERM, expected 0"
        ;;
    killed)
        step "$ending: kill the agent with SIGKILL"
        [ -s "$data/journal" ] || fail "the journal is empty: the claims made by hand went into a snapshot"
        kill -KILL "$agent_pid"
        wait "$agent_pid" 2>/dev/null || true
        agent_pid=""
        ;;
    esac

    step "$ending: reboot"
    reboot

    step "$ending: copy what the new binary reads to $out/$ending"
    # The data dir: the snapshot, the journal and the tasks' pid files; not
    # the sockets, the logs, nor the task dirs the agent makes at a task's
    # start.
    mkdir -p "$out/$ending/data"
    cp -p "$data/state.pb" "$data/journal" "$out/$ending/data/"
    (cd "$data" && find alloc -maxdepth 2 -name '*.pid' -type f) | while read -r pid_file; do
        mkdir -p "$out/$ending/data/$(dirname "$pid_file")"
        cp -p "$data/$pid_file" "$out/$ending/data/$pid_file"
    done
    # The plugin's base dir: its records, its nodes and the volumes' data,
    # which the host keeps; not its locks, made again at its start, nor
    # its strict verdict.
    mkdir -p "$out/$ending/backing"
    cp -rp "$backing/records" "$backing/nodes" "$backing/volumes" "$out/$ending/backing/"
    echo "$ending: plugin alloc $plugin_alloc, app alloc $app_alloc"
    remove_root
    root=""
}

for ending in $endings; do
    scenario "$ending"
done
current_step="done"
find "$out" -type f | sort
du -sh --apparent-size "$out"
echo "upgrade-fixture: wrote $out from $bin"
