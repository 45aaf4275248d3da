#!/usr/bin/env bash
# End to end with containers, as root: a private dockerd (its own data
# root, exec root and socket in a temporary directory; the host's engine is
# never touched), two images made offline with `docker import` (the
# built-in hostpath plugin with the libraries it links, and a busybox
# workload), and an agent that runs the plugin from its image as a
# privileged `csi_plugin` docker task, creates a volume on it, and runs a
# container workload that writes through its volume_mount. Stopping the
# jobs leaves no mount and no container; the agent exits 0 on SIGTERM.
# Then the same binary as a managed Docker plugin (scripts/docker-plugin.sh):
# created offline, enabled, a volume written and read by containers, its
# mounts under the propagated mount, none left after disable and rm.
#
# Usage: scripts/e2e-docker.sh          (make e2e; tests target/debug/csi-agent)
#        BIN=PATH scripts/e2e-docker.sh (tests another binary)
# Needs dockerd, docker and a static busybox (`make deps` installs them).
set -Eeuo pipefail

bin=${BIN:-target/debug/csi-agent}
script_name=e2e-docker
# shellcheck source=steps.sh
. "$(dirname "$0")/steps.sh"

[ "$(id -u)" -eq 0 ] || fail "run it as root: dockerd and the plugin mount"
[ -x "$bin" ] || fail "no executable csi-agent at $bin (run 'make build', or set BIN)"
command -v dockerd >/dev/null || fail "no dockerd: 'make deps' installs docker.io"
[ -x /bin/busybox ] || fail "no /bin/busybox: 'make deps' installs busybox-static"
bin=$(realpath "$bin")

# Short: the engine's and containerd's sockets live under it.
dir=$(mktemp -d /tmp/csi-e2e-d.XXXXXX)
agent_pid=""
dockerd_pid=""
sock="$dir/docker.sock"
docker() { command docker -H "unix://$sock" "$@"; }

cleanup() {
    status=$?
    if [ -n "$agent_pid" ]; then
        kill -KILL "$agent_pid" 2>/dev/null || true
        wait "$agent_pid" 2>/dev/null || true
    fi
    if [ -n "$dockerd_pid" ]; then
        docker rm -f $(docker ps -aq) >/dev/null 2>&1 || true
        kill -TERM "$dockerd_pid" 2>/dev/null || true
        wait "$dockerd_pid" 2>/dev/null || true
    fi
    if [ "$status" -ne 0 ]; then
        for log in agent dockerd; do
            if [ -s "$dir/$log.log" ]; then
                echo "---- $log log (last 40 lines) ----" >&2
                tail -n 40 "$dir/$log.log" >&2
            fi
        done
    fi
    for mount in $(mounts_under "$dir"); do
        umount -l "$mount" 2>/dev/null || true
    done
    if [ -z "$(mounts_under "$dir")" ]; then
        rm -rf --one-file-system "$dir"
    else
        echo "$script_name: mounts are still under $dir; it is left in place" >&2
    fi
}
trap cleanup EXIT

cli() { "$bin" "$@"; }

# `rootfs DIR`: a busybox root in DIR.
rootfs() {
    mkdir -p "$1/bin" "$1/tmp" "$1/proc" "$1/sys" "$1/dev" "$1/etc"
    cp /bin/busybox "$1/bin/busybox"
    for applet in sh echo cat ls sleep mkdir test; do
        ln -s busybox "$1/bin/$applet"
    done
}

step "start a private dockerd"
dockerd --data-root "$dir/docker" --exec-root "$dir/x" --pidfile "$dir/docker.pid" \
    -H "unix://$sock" --bridge=none --iptables=false --ip6tables=false \
    >"$dir/dockerd.log" 2>&1 &
dockerd_pid=$!
wait_until 60 docker version || fail "dockerd did not answer on $sock within 60 s"

step "make the plugin and workload images offline"
rootfs "$dir/img-plugin"
cp "$bin" "$dir/img-plugin/bin/csi-agent"
# The libraries it links (none for the static build).
for lib in $(ldd "$bin" 2>/dev/null | grep -o '/[^ ]*' || true); do
    mkdir -p "$dir/img-plugin$(dirname "$lib")"
    cp "$lib" "$dir/img-plugin$lib"
done
tar -C "$dir/img-plugin" -c . | docker import --change 'ENTRYPOINT ["/bin/csi-agent"]' - csi-e2e/hostpath:1 >/dev/null
rootfs "$dir/img-app"
tar -C "$dir/img-app" -c . | docker import - csi-e2e/busybox:1 >/dev/null
# By name, without a pipe: `ls | grep -q` can fail on the pipe alone
# (grep leaves early, docker dies of SIGPIPE, and pipefail counts it).
for image in csi-e2e/hostpath:1 csi-e2e/busybox:1; do
    wait_until 30 docker image inspect "$image" ||
        fail "the image $image was not made; the engine has: $(docker image ls 2>&1)"
done

data="$dir/data"
backing="$dir/backing"
mkdir -p "$data" "$backing"
export CSI_AGENT_ADDR="unix://$data/control.sock"

step "start the agent with the engine"
cat >"$dir/agent.hcl" <<EOF
# Written by scripts/e2e-docker.sh.
data_dir  = "$data"
node_name = "e2e-docker"

docker {
  endpoint         = "unix://$sock"
  allow_privileged = true
  volumes {
    enabled = true
  }
}
EOF
cli validate "$dir/agent.hcl" >/dev/null
RUST_LOG=csi_agent=debug "$bin" agent -config "$dir/agent.hcl" >"$dir/agent.log" 2>&1 &
agent_pid=$!
wait_until 30 cli plugin status || fail "the agent did not answer within 30 s"

step "job run: the hostpath plugin from its image"
cat >"$dir/plugin.nomad" <<EOF
job "hostpath-plugin" {
  group "csi" {
    task "plugin" {
      driver = "docker"
      config {
        image      = "csi-e2e/hostpath:1"
        args       = ["hostpath", "-endpoint", "\${CSI_ENDPOINT}", "-node-id", "e2e-docker", "-base-dir", "/backing"]
        privileged = true
        volumes    = ["$backing:/backing"]
      }
      csi_plugin {
        id        = "hostpath"
        type      = "monolith"
        mount_dir = "/csi"
      }
    }
  }
}
EOF
cli job run "$dir/plugin.nomad"
healthy() { cli plugin status -json hostpath | grep -q '"health": "HEALTHY"'; }
wait_until 60 healthy || fail "the plugin container did not become healthy within 60 s"
docker ps --filter label=csi-agent.job=hostpath-plugin --format '{{.Names}} {{.Image}}'

step "volume create"
cat >"$dir/volume.hcl" <<EOF
id        = "data"
name      = "data"
type      = "csi"
plugin_id = "hostpath"
capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
EOF
cli volume create "$dir/volume.hcl"

step "job run: a container writes through its volume_mount"
cat >"$dir/app.nomad" <<EOF
job "app" {
  type = "batch"
  group "app" {
    volume "data" {
      type            = "csi"
      source          = "data"
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }
    task "write" {
      driver = "docker"
      config {
        image   = "csi-e2e/busybox:1"
        command = "sh"
        args    = ["-c", "echo from \$NOMAD_ALLOC_ID > /data/app.txt"]
      }
      volume_mount {
        volume      = "data"
        destination = "/data"
      }
    }
  }
}
EOF
alloc=$(cli job run "$dir/app.nomad" | awk '$1 == "alloc" { print $2; exit }')
[ -n "$alloc" ] || fail "job run printed no alloc"
done_ok() { cli job status app | grep -q "^Status *= dead"; }
wait_until 60 done_ok || fail "the workload did not finish within 60 s"
[ "$(cat "$backing/volumes/data/app.txt")" = "from $alloc" ] ||
    fail "the volume does not hold what the container wrote"
released() { ! cli volume status data | grep -q "$alloc"; }
wait_until 30 released || fail "the workload's claim was not released"

step "job stop: nothing stays mounted or on the engine"
cli job stop hostpath-plugin
plugin_dead() { cli job status hostpath-plugin | grep -q "^Status *= dead"; }
wait_until 60 plugin_dead || fail "the plugin job did not stop within 60 s"
no_containers() { [ -z "$(docker ps -aq --filter "label=csi-agent.data_dir=$data")" ]; }
wait_until 30 no_containers || fail "containers left: $(docker ps -a)"
no_mounts() { [ -z "$(mounts_under "$data" | grep -v "^$data/csi\$")" ]; }
wait_until 30 no_mounts || fail "mounts left: $(mounts_under "$data")"

step "stop the agent with SIGTERM"
kill -TERM "$agent_pid"
code=0
wait "$agent_pid" || code=$?
agent_pid=""
[ "$code" -eq 0 ] || fail "the agent exited with status $code after SIGTERM, expected 0"

step "managed plugin: make docker-plugin of the same binary, create, set, enable"
BIN="$bin" DEST="$dir/docker-plugin" "$(dirname "$0")/docker-plugin.sh" >/dev/null
mkdir -p "$dir/plugin-data" "$dir/plugin-sockets"
docker plugin create csi "$dir/docker-plugin" >/dev/null
docker plugin set csi data.source="$dir/plugin-data" \
    csi-sockets.source="$dir/plugin-sockets" docker-socket.source="$sock"
docker plugin enable csi >/dev/null

step "managed plugin: a volume written and read by containers"
docker volume create -d csi plugged >/dev/null
docker run --rm --network none -v plugged:/data csi-e2e/busybox:1 sh -c 'echo managed > /data/f'
[ "$(docker run --rm --network none -v plugged:/data csi-e2e/busybox:1 cat /data/f)" = managed ] ||
    fail "a second container does not read what the first wrote"
[ "$(cat "$dir/plugin-data/hostpath/volumes/plugged/f")" = managed ] ||
    fail "the volume's data is not on the plugin's data mount"

step "managed plugin: its mounts lie under the propagated mount"
propagated="$dir/docker/plugins/$(docker plugin inspect -f '{{.Id}}' csi)/propagated-mount"
docker run -d --name holder --network none -v plugged:/data csi-e2e/busybox:1 sleep 1000 >/dev/null
[ -n "$(mounts_under "$propagated" | grep -v "^$propagated\$")" ] ||
    fail "nothing is mounted under $propagated while a container uses the volume"
for mount in $(mounts_under "$dir/docker/plugins"); do
    case $mount in
    "$propagated" | "$propagated"/*) ;;
    *) fail "$mount is not under the propagated mount $propagated" ;;
    esac
done
docker rm -f holder >/dev/null

step "managed plugin: volume rm, disable and rm leave no mount"
docker volume rm plugged >/dev/null
docker plugin disable csi >/dev/null
docker plugin rm csi >/dev/null
[ -z "$(mounts_under "$dir/docker/plugins")" ] ||
    fail "mounts left: $(mounts_under "$dir/docker/plugins")"

current_step="done"
echo "$script_name: all steps passed ($bin)"
