#!/usr/bin/env bash
# Tests `make install` and `make uninstall` in a temporary DESTDIR: every
# installed file and its mode, the units' contents (the service and its two
# sockets, which systemd-analyze verify must accept), the rule that an existing
# config is never overwritten, and what uninstall removes and keeps.
#
# Usage: scripts/install-test.sh      (make install-test; BIN=PATH installs
#                                      another binary, default target/debug/csi-agent)
# Each check prints "ok NAME"; the first failing one prints "FAIL NAME" and
# the script exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=${BIN:-target/debug/csi-agent}
[ -x "$bin" ] || { echo "FAIL preflight: no executable csi-agent at $bin (run 'make build', or set BIN)" >&2; exit 1; }
bin=$(realpath "$bin")

dest=$(mktemp -d /tmp/csi-agent-install.XXXXXX)
trap 'rm -rf "$dest"' EXIT

# `check NAME CMD...`: CMD must succeed.
check() {
    local name=$1
    shift
    if "$@"; then
        echo "ok   $name"
    else
        echo "FAIL $name: '$*' failed" >&2
        exit 1
    fi
}

# make with only the variables given here: none from the environment or
# from a calling make (make e2e runs this script).
mk() {
    env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u PREFIX -u DESTDIR -u SYSCONFDIR \
        -u UNITDIR -u BIN make --no-print-directory "$@"
}

mode() { [ "$(stat -c %a "$2")" = "$1" ]; }
has_line() { grep -qxF -- "$2" "$1"; }
absent() { [ ! -e "$1" ]; }
same() { cmp -s "$1" "$2"; }

bin_path="$dest/usr/local/bin/csi-agent"
unitdir="$dest/usr/local/lib/systemd/system"
unit="$unitdir/csi-agent.service"
control_socket="$unitdir/csi-agent-control.socket"
plugin_socket="$unitdir/csi-agent.socket"
config="$dest/etc/csi-agent/agent.hcl"
default_config=scripts/install/agent.hcl

echo "== make install DESTDIR=$dest"
mk install DESTDIR="$dest" BIN="$bin"
check "binary installed as PREFIX/bin/csi-agent" same "$bin" "$bin_path"
check "binary mode 0755" mode 755 "$bin_path"
check "installed binary runs" "$bin_path" version
check "unit installed in PREFIX/lib/systemd/system" test -f "$unit"
check "unit mode 0644" mode 644 "$unit"
check "unit Type=notify" has_line "$unit" "Type=notify"
check "unit ordered before the container engines" \
    has_line "$unit" "Before=docker.service podman.service podman-restart.service multi-user.target"
check "unit after the network and a local etcd" \
    has_line "$unit" "After=network-online.target local-fs.target etcd.service"
check "unit enables the control socket with it" has_line "$unit" "Also=csi-agent-control.socket"
for socket in "$control_socket" "$plugin_socket"; do
    name=$(basename "$socket")
    check "$name installed, mode 0644" mode 644 "$socket"
    check "$name is root's alone" has_line "$socket" "SocketMode=0600"
    check "$name activates csi-agent.service" has_line "$socket" "Service=csi-agent.service"
    check "$name is wanted by sockets.target" has_line "$socket" "WantedBy=sockets.target"
    check "$name has no unfilled @placeholder@" sh -c "! grep -q '@[a-z]*@' '$socket'"
done
check "the control socket is data_dir/control.sock, named control" sh -c \
    "grep -qxF 'ListenStream=/var/lib/csi-agent/control.sock' '$control_socket' &&
     grep -qxF 'FileDescriptorName=control' '$control_socket'"
check "the volume plugin socket is dockerd's csi.sock, named volume-plugin" sh -c \
    "grep -qxF 'ListenStream=/run/docker/plugins/csi.sock' '$plugin_socket' &&
     grep -qxF 'FileDescriptorName=volume-plugin' '$plugin_socket' &&
     grep -qxF 'Before=docker.service podman.service podman-restart.service' '$plugin_socket'"
check "unit ExecStart runs the agent with the config" \
    has_line "$unit" "ExecStart=/usr/local/bin/csi-agent agent -config /etc/csi-agent/agent.hcl"
check "unit validates the config first" \
    has_line "$unit" "ExecStartPre=/usr/local/bin/csi-agent validate /etc/csi-agent/agent.hcl"
check "unit ExecReload sends SIGHUP" has_line "$unit" 'ExecReload=/bin/kill -HUP $MAINPID'
check "unit KillSignal=SIGTERM" has_line "$unit" "KillSignal=SIGTERM"
check "unit Restart=on-failure" has_line "$unit" "Restart=on-failure"
check "unit WantedBy=multi-user.target" has_line "$unit" "WantedBy=multi-user.target"
check "unit has no unfilled @placeholder@" sh -c "! grep -q '@[a-z]*@' '$unit'"
check "unit has no DESTDIR in it" sh -c "! grep -qF '$dest' '$unit'"
check "unit has no sandboxing that hides mounts" \
    sh -c "! grep -Eq '^(PrivateTmp|ProtectSystem|ProtectHome|PrivateMounts|ReadOnlyPaths|ReadWritePaths)=' '$unit'"
# systemd-analyze verify works without a running systemd. It only warns
# about a line it cannot parse, so any output is a failure. It looks for
# ExecStart's binary on the real root: give it copies naming the installed
# one, side by side, so that the sockets find their service.
verify_units() {
    local out
    mkdir -p "$dest/verify"
    for file in "$unit" "$control_socket" "$plugin_socket"; do
        sed "s|/usr/local/bin/csi-agent|$bin_path|g" "$file" >"$dest/verify/$(basename "$file")"
    done
    out=$(cd "$dest/verify" && systemd-analyze verify csi-agent.service \
        csi-agent-control.socket csi-agent.socket 2>&1) && [ -z "$out" ] ||
        { echo "$out" >&2; return 1; }
}
# make deps installs it (Debian's systemd); under CI a missing one fails.
if command -v systemd-analyze >/dev/null 2>&1; then
    check "systemd-analyze verify accepts the three units" verify_units
elif [ "${CI:-}" = true ]; then
    echo "FAIL systemd-analyze is not installed (make deps installs Debian's systemd)" >&2
    exit 1
else
    echo "skip systemd-analyze verify: systemd-analyze is not installed (make deps)"
fi
check "default config installed" same "$default_config" "$config"
check "config mode 0644" mode 644 "$config"
check "default config validates" "$bin_path" validate "$config"
# The commented-out plugin and host_volume examples must be valid too.
awk '/^# (plugin|host_volume) /{on=1} on{sub(/^# ?/, "")} /^}/{on=0} {print}' \
    "$config" >"$dest/examples.hcl"
check "the config's commented examples validate" "$bin_path" validate "$dest/examples.hcl"

echo "== make install again, over a changed config"
echo 'log_level = "debug" # changed by the admin' >>"$config"
cp "$config" "$dest/changed.hcl"
echo "stale" >"$bin_path"
mk install DESTDIR="$dest" BIN="$bin"
check "an existing config is not overwritten" same "$dest/changed.hcl" "$config"
check "the binary is replaced" same "$bin" "$bin_path"

echo "== make uninstall, with the changed config"
mk uninstall DESTDIR="$dest"
check "uninstall removes the binary" absent "$bin_path"
check "uninstall removes the unit" absent "$unit"
check "uninstall removes the socket units" sh -c "[ ! -e '$control_socket' ] && [ ! -e '$plugin_socket' ]"
check "uninstall keeps a changed config" same "$dest/changed.hcl" "$config"

echo "== make uninstall, with the default config"
cp "$default_config" "$config"
mk uninstall DESTDIR="$dest"
check "uninstall removes the default config" absent "$config"
check "uninstall removes the empty config dir" absent "$dest/etc/csi-agent"

echo "== make install PREFIX=/usr"
mk install DESTDIR="$dest" PREFIX=/usr BIN="$bin"
check "binary in /usr/bin" same "$bin" "$dest/usr/bin/csi-agent"
check "unit in /usr/lib/systemd/system, pointing at /usr/bin" has_line \
    "$dest/usr/lib/systemd/system/csi-agent.service" \
    "ExecStart=/usr/bin/csi-agent agent -config /etc/csi-agent/agent.hcl"
mk uninstall DESTDIR="$dest" PREFIX=/usr
check "uninstall PREFIX=/usr removes the binary" absent "$dest/usr/bin/csi-agent"

echo "== make install with a missing binary"
if out=$(mk install DESTDIR="$dest/missing" BIN="$dest/no-such-binary" 2>&1); then
    echo "FAIL install of a missing binary succeeded: $out" >&2
    exit 1
fi
check "install of a missing binary says why" grep -q "is not an executable file" <<<"$out"
check "install of a missing binary writes nothing" absent "$dest/missing"

echo "install test passed ($bin)"
