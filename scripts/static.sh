#!/usr/bin/env bash
# Builds csi-agent as one fully static musl executable for x86_64 (the
# default) or aarch64 (ARCH=aarch64), and refuses the result unless `file`
# and the ELF headers (and, for the host's own architecture, `ldd`) say it
# is static.
#
# gRPC's C++ core needs a C++ compiler and standard library for musl, which
# Debian does not package (musl-gcc is C only). zig ships both, so zig is the
# C/C++ compiler and linker, driven by cargo-zigbuild. Both come from PyPI and
# are installed, at pinned versions, in a virtualenv under target/.
#
# Usage: scripts/static.sh        (`make static`; about 25 minutes on two cores
#                                  the first time: gRPC's C++ core is compiled
#                                  again, for musl)
#        ARCH=aarch64 scripts/static.sh   (`make static ARCH=aarch64`: the
#                                  same for 64-bit ARM, cross-compiled by zig;
#                                  its own gRPC build, as long again)
#        scripts/static.sh -check FILE   (only the checks, on FILE, of
#                                  either architecture)
# Prints the path of the stripped binary and its size.
set -euo pipefail

# The architectures a static binary is built for, as Rust's target triples
# spell them: x86_64-unknown-linux-musl, aarch64-unknown-linux-musl.
arch=${ARCH:-x86_64}
case "$arch" in
x86_64 | aarch64) ;;
*) echo "error: ARCH must be x86_64 or aarch64, not \"$arch\"" >&2; exit 1 ;;
esac
target=$arch-unknown-linux-musl
# The spelling of the target in the environment variables cc-rs, cmake-rs
# and cargo-zigbuild read (CFLAGS_aarch64_unknown_linux_musl, ...).
target_var=${target//-/_}
# The versions `make static` was last seen to work with. A newer clang (in a
# newer zig) may turn another warning in gRPC's sources into an error.
ziglang_version=${ZIGLANG_VERSION:-0.17.0}
zigbuild_version=${CARGO_ZIGBUILD_VERSION:-0.24.0}

fail() {
    echo "error: $*" >&2
    exit 1
}

# Refuses anything that is not fully static, as Firecracker's release script
# does: a binary that still needs a loader or a shared library is not the
# one to ship. `file` must say so, and the ELF headers must agree: no
# PT_INTERP program header (no loader) and no DT_NEEDED entry (no shared
# library). ldd runs the host's loader, so it is asked only about a binary
# of the host's own architecture; for another one (aarch64 on an x86_64
# host) the headers are the check. Sets `description` and `ldd_out` for the
# summary.
check_static() {
    description=$(file -b "$1")
    case "$description" in
    *"statically linked"*) ;;
    *) fail "$1 is not statically linked: file says: $description" ;;
    esac
    local headers
    headers=$(LC_ALL=C readelf -W -l -d "$1" 2>&1) || fail "readelf cannot read $1: $headers"
    if grep -q 'INTERP' <<<"$headers"; then
        fail "$1 is not static: it names a program interpreter (readelf -l shows INTERP)"
    fi
    if grep -q '(NEEDED)' <<<"$headers"; then
        fail "$1 is not static: it needs shared libraries (readelf -d): $(grep '(NEEDED)' <<<"$headers" | tr -s ' ')"
    fi
    if [ "$(elf_machine "$1")" = "$(elf_machine /proc/self/exe)" ]; then
        ldd_out=$(ldd "$1" 2>&1 || true)
        case "$ldd_out" in
        *"not a dynamic executable"*) ;;
        *) fail "$1 is not static: ldd says: $ldd_out" ;;
        esac
    else
        ldd_out="not run (built for $(elf_machine "$1"), this host is $(elf_machine /proc/self/exe)); readelf shows no INTERP and no NEEDED"
    fi
    case "$description" in
    *", stripped"*) ;;
    *) fail "$1 is not stripped: file says: $description" ;;
    esac
}

# The machine an ELF file is built for, as readelf names it (e.g.
# "Advanced Micro Devices X86-64", "AArch64").
elf_machine() {
    LC_ALL=C readelf -h "$1" | sed -n 's/^ *Machine: *//p'
}

case "${1:-}" in
"") ;;
-check)
    # Only the checks, on a given binary: scripts/static.sh -check FILE.
    [ -f "${2:-}" ] || fail "usage: scripts/static.sh [-check FILE]"
    check_static "$2"
    echo "$2: static and stripped"
    exit 0
    ;;
*) fail "usage: scripts/static.sh [-check FILE]" ;;
esac

cd "$(dirname "$0")/.."
tools=$PWD/target/static-tools
# The `static` profile of Cargo.toml (size-optimised, fat LTO).
bin=${CARGO_TARGET_DIR:-target}/$target/static/csi-agent

# Debian packages the build needs: cmake for gRPC, python3 with venv for
# the PyPI tools, file and binutils (strip) for the checks below.
missing=""
command -v cmake >/dev/null 2>&1 || missing="$missing cmake"
command -v make >/dev/null 2>&1 || missing="$missing make"
command -v file >/dev/null 2>&1 || missing="$missing file"
command -v strip >/dev/null 2>&1 || missing="$missing binutils"
command -v python3 >/dev/null 2>&1 || missing="$missing python3"
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    missing="$missing python3-venv"
fi
if [ -n "$missing" ]; then
    command -v apt-get >/dev/null 2>&1 || fail "missing:$missing (and no apt-get to install them)"
    echo "installing:$missing"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
fi

command -v cargo >/dev/null 2>&1 || fail "cargo not found: install Rust 1.80 or newer (https://rustup.rs)"
if ! rustc --print sysroot >/dev/null 2>&1 ||
    [ ! -d "$(rustc --print sysroot)/lib/rustlib/$target" ]; then
    command -v rustup >/dev/null 2>&1 || fail "the Rust target $target is missing and rustup is not installed"
    rustup target add "$target"
fi

# zig and cargo-zigbuild, in their own virtualenv (Debian's python refuses
# `pip install` outside one). A stamp file records the installed versions.
stamp="$tools/venv/versions"
want="ziglang==$ziglang_version cargo-zigbuild==$zigbuild_version"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "installing $want into $tools/venv"
    rm -rf "$tools/venv"
    python3 -m venv "$tools/venv"
    "$tools/venv/bin/pip" install --quiet --disable-pip-version-check $want
    echo "$want" >"$stamp"
fi

# grpcio-sys hands $CXX to cmake as CMAKE_CXX_COMPILER, and without it
# hard-codes g++ for musl targets. cargo-zigbuild generates a zig c++ wrapper
# for the target, under a hashed name, and exports its path to the build
# scripts as CXX_<target> (CXX_aarch64_unknown_linux_musl, ...); this forwarder, one
# per architecture, runs that wrapper.
# (cargo-zigbuild's cmake toolchain file names the same wrapper, so that is
# what CMakeCache.txt records.)
# The x86_64 one keeps the name it had before there were two: cc-rs has
# cargo rerun grpcio-sys's build script (all of gRPC) when $CXX changes.
case "$arch" in
x86_64) cxx="$tools/bin/musl-c++" ;;
*) cxx="$tools/bin/$arch-musl-c++" ;;
esac
mkdir -p "$tools/bin"
cat >"$cxx" <<EOF
#!/bin/sh
# Written by scripts/static.sh: the C++ compiler gRPC's cmake build uses.
exec "\${CXX_$target_var:?not set: run through cargo zigbuild (scripts/static.sh)}" "\$@"
EOF
chmod 0755 "$cxx"

# musl >= 1.2.4 declares off64_t only with _LARGEFILE64_SOURCE, and abseil
# uses it. Newer clang makes a diagnostic in gRPC's basic_seq.h an error.
#
# The rest keeps the binary under 8 MiB (row P5 of BENCHMARKS.md)
# without leaving out anything the agent uses:
# - OPENSSL_SMALL: BoringSSL's smaller, slower P-256 and X25519 code,
#   without their large precomputed tables.
# - No unwind tables and, for C++, no exceptions and no RTTI. gRPC's core,
#   abseil and upb never throw, catch, dynamic_cast or typeid (abseil then
#   aborts where it would throw; BoringSSL builds its C++ this way
#   already). Nothing unwinds through C or C++ frames: a Rust panic stops
#   at the extern "C" callbacks grpcio gives gRPC (Rust aborts rather
#   than unwind out of one), and our own panics unwind Rust frames only.
# - GRPC_NO_XDS: gRPC's TLS library (the boringssl feature) registers the
#   xDS resolver, load-balancing policies and RBAC filter at start, which
#   keeps them, their Envoy protos and re2 in the binary. csi-agent dials
#   etcd members by host:port and never uses xDS; without the registration
#   the linker leaves them out. GRPC_NO_RLS does the same for the
#   route-lookup balancer.
# - GRPC_ARES=0: host names resolve with getaddrinfo (musl's, reading
#   /etc/hosts and /etc/resolv.conf) on gRPC's executor instead of with
#   c-ares. Only etcd endpoints are host names; plugins and the control
#   API are unix sockets.
flags="-D_LARGEFILE64_SOURCE -DOPENSSL_SMALL -fno-unwind-tables -fno-asynchronous-unwind-tables"
export "CFLAGS_$target_var=$flags"
export "CXXFLAGS_$target_var=$flags -DGRPC_NO_XDS -DGRPC_NO_RLS -DGRPC_ARES=0 -fno-exceptions -fno-rtti -Wno-error=missing-template-arg-list-after-template-kw"
export CXX="$cxx"
# gRPC's C++ core and BoringSSL from source, linked statically, whatever
# `make GRPC=...` or .cargo/config.toml ask of the development build: no
# system gRPC (nor pkg-config) for musl exists to link.
export GRPCIO_SYS_USE_PKG_CONFIG=0
export PATH="$tools/venv/bin:$PATH"

# The binary's final link goes through scripts/static-link.sh, which folds
# identical C++ functions (lld's --icf=safe) after zig's link; only the
# csi-agent binary gets that linker, so the other crates are built as by
# `cargo zigbuild`. STATIC_LINK_ICF=none links as zig alone does.
export STATIC_LINK_TARGET="$target"
start=$(date +%s)
cargo-zigbuild rustc --locked --profile static --target "$target" --bin csi-agent \
    -- -C linker="$PWD/scripts/static-link.sh"
echo "built in $(($(date +%s) - start))s"

# The static profile strips already (strip = true, through the linker);
# the host's strip makes sure of it where it knows the architecture.
# Debian's x86_64 binutils does not know aarch64: check_static then
# refuses a binary the linker left unstripped.
if [ "$(elf_machine "$bin")" = "$(elf_machine /proc/self/exe)" ]; then
    strip "$bin"
fi
check_static "$bin"
case "$arch:$description" in
x86_64:*"x86-64"* | aarch64:*"ARM aarch64"*) ;;
*) fail "$bin is not an $arch executable: file says: $description" ;;
esac

size=$(stat -c %s "$bin")
echo "$bin: $size bytes ($(numfmt --to=si --suffix=B "$size")), static, stripped"
echo "  file: $description"
echo "  ldd:  ${ldd_out//$'\t'/}"
