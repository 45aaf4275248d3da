#!/usr/bin/env bash
# The aarch64 checks on a host of another architecture (x86_64 here, in
# CI), under Debian's qemu-user-static through binfmt_misc: the kernel
# hands every aarch64 ELF file it is asked to exec to qemu-aarch64, so
# the tests' own children (helpers, plugins, the agent) run emulated too.
#
#   unit  the unit tests of the library and of the workspace's crates,
#         built for aarch64-unknown-linux-gnu against Debian's arm64
#         gRPC core (multiarch libgrpc-dev:arm64, cross-linked by
#         gcc-aarch64-linux-gnu): no gRPC or BoringSSL is
#         compiled, only grpcio-sys's small C++ wrapper and the artifact
#         shim. The musl build of the same code is the static binary's
#         (`make static ARCH=aarch64`), which the e2e below runs.
#   dev_bin  the development binary built for aarch64-unknown-linux-gnu
#         the same way, for the e2e below instead of the static binary.
#   e2e   the install test (scripts/install-test.sh: make install, its
#         unit and config, and uninstall), then scripts/e2e.sh (the agent,
#         the built-in hostpath plugin and the CLI, with real mounts), with
#         the static aarch64 binary, or the one dev_bin built.
#
# What qemu-user cannot do is not skipped silently: the tests that need it
# detect the emulator (sys::emulation) and print what they did not check;
# docs/install.md lists them.
#
# Usage: scripts/test-arm64.sh [unit|dev_bin|e2e]...   (`make test-arm64`:
#        unit and e2e; CI: unit dev_bin e2e, with the development binary)
#        ARM64_BIN=PATH scripts/test-arm64.sh e2e   (another aarch64 binary;
#        default target/aarch64-unknown-linux-musl/static/csi-agent)
# Needs root: binfmt_misc, apt, and the tests' mounts. Prints each part's
# wall time.
set -euo pipefail

cd "$(dirname "$0")/.."
gnu=aarch64-unknown-linux-gnu
bin=${ARM64_BIN:-${CARGO_TARGET_DIR:-target}/aarch64-unknown-linux-musl/static/csi-agent}
binfmt=/proc/sys/fs/binfmt_misc

fail() {
    echo "test-arm64: error: $*" >&2
    exit 1
}

[ "$(id -u)" -eq 0 ] || fail "run it as root: binfmt_misc, apt and the tests' mounts need it"

# Debian packages, installed when missing: the emulator and the binfmt
# registration; the arm64 gRPC core with its headers and pkg-config files
# (multiarch: the arm64 architecture is added to dpkg first), and the
# cross compilers that link against it.
install_packages() {
    local missing="" pkg
    for pkg in "$@"; do
        dpkg -s "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"
    done
    [ -z "$missing" ] && return
    echo "installing:$missing"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
}

# binfmt_misc mounted and qemu-aarch64 registered and enabled; each step
# only when it is not done yet. The registration has the F flag (the
# interpreter is opened once, at registration), so it also works inside
# the mount namespaces the tests make.
setup_binfmt() {
    install_packages qemu-user-static binfmt-support
    if ! mountpoint -q "$binfmt"; then
        mount -t binfmt_misc binfmt_misc "$binfmt"
    fi
    if [ ! -e "$binfmt/qemu-aarch64" ]; then
        update-binfmts --import qemu-aarch64 >/dev/null 2>&1 || true
    fi
    if ! grep -qx enabled "$binfmt/qemu-aarch64" 2>/dev/null; then
        update-binfmts --enable qemu-aarch64
    fi
    grep -qx enabled "$binfmt/qemu-aarch64" 2>/dev/null ||
        fail "binfmt_misc has no enabled qemu-aarch64 entry ($binfmt/qemu-aarch64)"
}

# The cross build for aarch64-unknown-linux-gnu against Debian's arm64
# gRPC core: packages, target and environment.
cross_env() {
    dpkg --print-foreign-architectures | grep -qx arm64 || {
        dpkg --add-architecture arm64
        # Forces install_packages' apt-get update, for the arm64 lists.
        rm -f /var/lib/apt/lists/*_binary-arm64_Packages* 2>/dev/null || true
    }
    install_packages libgrpc-dev:arm64 gcc-aarch64-linux-gnu g++-aarch64-linux-gnu
    if [ ! -d "$(rustc --print sysroot)/lib/rustlib/$gnu" ]; then
        rustup target add "$gnu"
    fi
    export GRPCIO_SYS_USE_PKG_CONFIG=1
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
    export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
    export CXX_aarch64_unknown_linux_gnu=aarch64-linux-gnu-g++
    export AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar
    # pkg-config's cross wrapper reads /usr/lib/aarch64-linux-gnu/pkgconfig.
    export PKG_CONFIG_aarch64_unknown_linux_gnu=aarch64-linux-gnu-pkg-config
    export PKG_CONFIG_ALLOW_CROSS=1
    # binfmt_misc runs the test binary; naming qemu as the runner would
    # only add a second, explicit way of doing the same. Our crates are
    # compiled at opt-level 1 (their dependencies are at 2 already, in the
    # dev profile): emulated, unoptimised code made the tests that run a
    # template or an HCL expression to its step limit take minutes each.
    # Debug assertions and overflow checks stay on, as in `make test`.
    export CARGO_PROFILE_DEV_OPT_LEVEL=1
}

unit() {
    cross_env
    local start=$SECONDS
    cargo test --locked --workspace --lib --target "$gnu" --no-run
    echo "test-arm64: unit tests built in $((SECONDS - start)) s"
    start=$SECONDS
    local notes
    notes=$(mktemp /tmp/csi-agent-emulation-notes.XXXXXX)
    CSI_AGENT_EMULATION_NOTES=$notes cargo test --locked --workspace --lib --target "$gnu"
    echo "test-arm64: unit tests ran in $((SECONDS - start)) s (emulated)"
    # What the tests could not check under the emulator, or checked more
    # loosely (sys::emulation::note), so that it is read, not skipped.
    if [ -s "$notes" ]; then
        echo "test-arm64: what the tests noted under emulation:"
        sort -u "$notes" | sed 's/^/  /'
    fi
    rm -f "$notes"
}

# The development binary built for aarch64-unknown-linux-gnu (dynamic,
# Debian's arm64 gRPC core and glibc under qemu), where the static
# aarch64 binary's own from-source gRPC build is too long for a run.
dev_bin() {
    cross_env
    local start=$SECONDS
    cargo build --locked --bin csi-agent --target "$gnu"
    echo "test-arm64: development binary built in $((SECONDS - start)) s"
    bin=${CARGO_TARGET_DIR:-target}/$gnu/debug/csi-agent
}

e2e() {
    [ -x "$bin" ] || fail "no aarch64 binary at $bin: run 'make static ARCH=aarch64' first, or set ARM64_BIN"
    case "$(file -b "$bin")" in
    *"ARM aarch64"*) ;;
    *) fail "$bin is not an aarch64 executable: file says: $(file -b "$bin")" ;;
    esac
    local start=$SECONDS
    BIN=$bin scripts/install-test.sh
    BIN=$bin scripts/e2e.sh
    echo "test-arm64: e2e ran in $((SECONDS - start)) s (emulated)"
}

parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(unit e2e)
for part in "${parts[@]}"; do
    case "$part" in
    unit | dev_bin | e2e) ;;
    *) fail "usage: scripts/test-arm64.sh [unit|dev_bin|e2e]..." ;;
    esac
done
setup_binfmt
for part in "${parts[@]}"; do
    "$part"
done
