#!/usr/bin/env bash
# `make install` and `make uninstall`.
#
# install puts
#   BIN                        at $DESTDIR$PREFIX/bin/csi-agent
#   the systemd units          at $DESTDIR$UNITDIR: csi-agent.service and
#                              its sockets, csi-agent-control.socket (the
#                              CLI's) and csi-agent.socket (dockerd's)
#   the default config         at $DESTDIR$SYSCONFDIR/csi-agent/agent.hcl,
#                              only when no file is there: yours is kept
# uninstall removes the binary and the units, and the config only when it is
# still the default one (then its directory too, if empty). It never
# touches the agent's data dir.
#
# Usage: scripts/install.sh install|uninstall
# Environment (the Makefile passes its variables): BIN (install only),
# PREFIX (/usr/local), DESTDIR (empty), SYSCONFDIR (/etc),
# UNITDIR ($PREFIX/lib/systemd/system).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
prefix=${PREFIX:-/usr/local}
destdir=${DESTDIR:-}
sysconfdir=${SYSCONFDIR:-/etc}
unitdir=${UNITDIR:-$prefix/lib/systemd/system}

bin_dest="$destdir$prefix/bin/csi-agent"
# The units, each written from scripts/install/UNIT.in.
units="csi-agent.service csi-agent-control.socket csi-agent.socket"
config_dir="$destdir$sysconfdir/csi-agent"
config_dest="$config_dir/agent.hcl"
default_config="$here/install/agent.hcl"

fail() {
    echo "error: $*" >&2
    exit 1
}

for dir in "$prefix" "$sysconfdir" "$unitdir"; do
    case "$dir" in
    /*) ;;
    *) fail "PREFIX, SYSCONFDIR and UNITDIR must be absolute paths, found '$dir'" ;;
    esac
done

# systemd only acts on an installed unit after a reload, and keeps running
# one after it is removed: say what to run, since only root on the real
# system may do it.
systemd_hint() {
    if [ -z "$destdir" ] && [ -d /run/systemd/system ]; then
        echo "$1"
    fi
}

install_files() {
    local bin=${BIN:?BIN must name the csi-agent binary to install}
    [ -f "$bin" ] && [ -x "$bin" ] || fail "BIN=$bin is not an executable file (run 'make build' or 'make static')"

    install -D -m 0755 "$bin" "$bin_dest"
    echo "installed $bin_dest"

    install -d -m 0755 "$destdir$unitdir"
    local unit unit_dest
    for unit in $units; do
        unit_dest="$destdir$unitdir/$unit"
        sed -e "s|@bindir@|$prefix/bin|g" -e "s|@sysconfdir@|$sysconfdir|g" \
            "$here/install/$unit.in" >"$unit_dest.tmp"
        chmod 0644 "$unit_dest.tmp"
        mv -f "$unit_dest.tmp" "$unit_dest"
        echo "installed $unit_dest"
    done

    if [ -e "$config_dest" ]; then
        echo "kept $config_dest: it exists (the default is $default_config)"
    else
        install -D -m 0644 "$default_config" "$config_dest"
        echo "installed $config_dest"
    fi
    systemd_hint "now: systemctl daemon-reload && systemctl enable --now csi-agent (and, with a volume_plugin block, systemctl enable --now csi-agent.socket)"
}

uninstall_files() {
    systemd_hint "if the service is enabled or running, first: systemctl disable --now csi-agent csi-agent-control.socket csi-agent.socket"
    rm -f "$bin_dest"
    echo "removed $bin_dest"
    local unit
    for unit in $units; do
        rm -f "$destdir$unitdir/$unit"
        echo "removed $destdir$unitdir/$unit"
    done
    if [ ! -e "$config_dest" ]; then
        :
    elif cmp -s "$default_config" "$config_dest"; then
        rm -f "$config_dest"
        rmdir "$config_dir" 2>/dev/null || true
        echo "removed $config_dest (it was the default)"
    else
        echo "kept $config_dest: it differs from the default"
    fi
    systemd_hint "then: systemctl daemon-reload"
}

case "${1:-}" in
install) install_files ;;
uninstall) uninstall_files ;;
*) fail "usage: scripts/install.sh install|uninstall" ;;
esac
