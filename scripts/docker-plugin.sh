#!/usr/bin/env bash
# Builds csi-agent as a managed Docker plugin: a directory holding
# `config.json` and `rootfs/`, which `docker plugin create NAME DIR` takes
# offline (no registry, no image build).
#
# Usage: scripts/docker-plugin.sh            (make docker-plugin)
#        BIN=PATH DEST=DIR scripts/docker-plugin.sh
#
# BIN is the binary put in the plugin, by default the static one
# (target/x86_64-unknown-linux-musl/static/csi-agent, `make static`). A
# dynamically linked BIN, such as the development build target/debug/csi-agent,
# gets the shared libraries `ldd` names and their loader copied into the
# rootfs at the same paths, so the tests can build a plugin of the dev
# binary; it carries its libraries, but weighs some 70 MiB against the
# static one's 8: ship the static one.
#
# What runs inside, and why the paths are what they are, is in
# docs/docker-volumes.md ("As a managed Docker plugin").
set -Eeuo pipefail

bin=${BIN:-target/x86_64-unknown-linux-musl/static/csi-agent}
dest=${DEST:-target/docker-plugin}

fail() {
    echo "docker-plugin: $*" >&2
    exit 1
}

[ -x "$bin" ] || fail "no executable csi-agent at $bin (run 'make static', or set BIN=target/debug/csi-agent)"
command -v ldd >/dev/null || fail "no ldd (Debian's libc-bin)"

# Built afresh each time, so nothing of an older build lingers; the
# directory is ours only if it looks like one of our builds.
if [ -e "$dest" ]; then
    [ -f "$dest/config.json" ] && [ -d "$dest/rootfs" ] ||
        fail "$dest exists and is not a plugin directory this script made; remove it or set DEST"
    rm -rf --one-file-system "$dest"
fi
rootfs=$dest/rootfs
mkdir -p "$rootfs"

# The directories the agent needs: its data dir and the propagated mount
# (both mount points), the volume plugin socket's dir (dockerd binds its
# runtime dir there), /run/csi (the CSI sockets mount), /tmp, /etc for its
# config and the resolver files dockerd binds in for host networking,
# /var/run for the engine's socket; /proc, /sys and /dev are the runtime's.
for d in bin etc/csi-agent tmp run/docker/plugins run/csi var/run var/lib/csi-agent \
    mnt/csi-agent proc sys dev; do
    mkdir -p "$rootfs/$d"
done
chmod 1777 "$rootfs/tmp"
: >"$rootfs/etc/hosts"
: >"$rootfs/etc/resolv.conf"
install -m 0755 "$bin" "$rootfs/bin/csi-agent"

# A dynamic binary: every library ldd resolves, and the loader, at the
# paths it names (the loader finds the libraries in its default dirs, as
# on the build host). A static binary has neither ("not a dynamic
# executable").
if libs=$(ldd "$bin" 2>/dev/null); then
    if grep -q 'not found' <<<"$libs"; then
        fail "ldd cannot find every library of $bin:
$(grep 'not found' <<<"$libs")"
    fi
    awk '
        $2 == "=>" && $3 ~ /^\// { print $3 }
        $1 ~ /^\// { print $1 }
    ' <<<"$libs" | sort -u | while read -r lib; do
        mkdir -p "$rootfs$(dirname "$lib")"
        cp -L "$lib" "$rootfs$lib"
    done
fi

# The agent's config inside the plugin. `docker plugin set NAME args=...`
# points the agent at another one (on the data mount, say).
cat >"$rootfs/etc/csi-agent/agent.hcl" <<'EOF'
# csi-agent inside its managed Docker plugin (`make docker-plugin`).
# Another config: put it on the data mount (the host's
# /var/lib/docker-plugins/csi-agent/agent.hcl) and
#     docker plugin set csi args="-config /var/lib/csi-agent/agent.hcl -hostpath"

# The plugin's "data" mount: state, journal and the hostpath plugin's
# volumes live on the host, so an upgrade or a re-create keeps them.
data_dir = "/var/lib/csi-agent"

# The plugin's propagated mount: every staging and publish lies under it,
# so the mounts reach the host, where dockerd hands them to containers.
csi_dir = "/mnt/csi-agent"

volume_plugin {
  # The driver name is the plugin's name: create the plugin as "csi".
  name      = "csi"
  # The config's interface socket, in the dir dockerd binds its own over.
  socket    = "/run/docker/plugins/csi.sock"
  # -hostpath runs the built-in hostpath plugin as plugin "hostpath".
  plugin_id = "hostpath"
}
EOF
"$bin" validate "$rootfs/etc/csi-agent/agent.hcl" >/dev/null ||
    fail "$bin refuses the plugin's config (above)"

cat >"$dest/config.json" <<'EOF'
{
  "description": "csi-agent: CSI volumes for docker run and Compose",
  "documentation": "docs/docker-volumes.md of csi-agent's sources",
  "entrypoint": ["/bin/csi-agent", "agent"],
  "workdir": "/",
  "interface": {
    "types": ["docker.volumedriver/1.0"],
    "socket": "csi.sock"
  },
  "network": { "type": "host" },
  "propagatedMount": "/mnt/csi-agent",
  "ipcHost": false,
  "pidHost": false,
  "linux": {
    "capabilities": ["CAP_SYS_ADMIN"],
    "allowAllDevices": false,
    "devices": []
  },
  "mounts": [
    {
      "name": "data",
      "description": "the agent's data dir on the host: its state and the hostpath plugin's volumes, kept across upgrades",
      "settable": ["source"],
      "source": "/var/lib/docker-plugins/csi-agent",
      "destination": "/var/lib/csi-agent",
      "type": "bind",
      "options": ["rbind", "rw"]
    },
    {
      "name": "csi-sockets",
      "description": "a host dir of CSI plugin sockets, named by the config's plugin blocks",
      "settable": ["source"],
      "source": "/run/csi",
      "destination": "/run/csi",
      "type": "bind",
      "options": ["rbind", "rw"]
    },
    {
      "name": "docker-socket",
      "description": "the engine's API socket: lost unmounts are checked against its containers",
      "settable": ["source"],
      "source": "/var/run/docker.sock",
      "destination": "/var/run/docker.sock",
      "type": "bind",
      "options": ["bind", "rw"]
    }
  ],
  "env": [
    {
      "name": "RUST_LOG",
      "description": "the agent's log filter (error, warn, info, debug), over the config's log_level",
      "settable": ["value"],
      "value": "info"
    }
  ],
  "args": {
    "name": "args",
    "description": "the flags of csi-agent agent: -config FILE, -hostpath (the built-in hostpath plugin)",
    "settable": ["value"],
    "value": ["-config", "/etc/csi-agent/agent.hcl", "-hostpath"]
  }
}
EOF

echo "docker-plugin: $dest (config.json, rootfs with $(basename "$bin") from $bin)"
echo "  mkdir -p /var/lib/docker-plugins/csi-agent /run/csi"
echo "  docker plugin create csi $dest && docker plugin enable csi"
