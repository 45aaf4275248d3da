#!/usr/bin/env bash
# Tests `make install` and `make uninstall` in a temporary DESTDIR: every
# installed file and its mode, the unit's contents, the rule that an existing
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
unit="$dest/usr/local/lib/systemd/system/csi-agent.service"
config="$dest/etc/csi-agent/agent.hcl"
default_config=scripts/install/agent.hcl

echo "== make install DESTDIR=$dest"
mk install DESTDIR="$dest" BIN="$bin"
check "binary installed as PREFIX/bin/csi-agent" same "$bin" "$bin_path"
check "binary mode 0755" mode 755 "$bin_path"
check "installed binary runs" "$bin_path" version
check "unit installed in PREFIX/lib/systemd/system" test -f "$unit"
check "unit mode 0644" mode 644 "$unit"
check "unit Type=simple" has_line "$unit" "Type=simple"
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
# ExecStart's binary on the real root: give it a copy naming the installed one.
verify_unit() {
    local out
    sed "s|/usr/local/bin/csi-agent|$bin_path|g" "$unit" >"$dest/csi-agent.service"
    out=$(systemd-analyze verify "$dest/csi-agent.service" 2>&1) && [ -z "$out" ] ||
        { echo "$out" >&2; return 1; }
}
if command -v systemd-analyze >/dev/null 2>&1; then
    check "systemd-analyze verify accepts the unit" verify_unit
else
    echo "skip systemd-analyze verify: systemd-analyze is not installed"
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
