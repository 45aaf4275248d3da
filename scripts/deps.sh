#!/bin/sh
# Installs what building csi-agent needs on Debian, when it is missing:
# Debian's gRPC core (libgrpc-dev, with pkg-config and the OpenSSL, zlib,
# re2, c-ares and abseil headers it requires), which the development build
# links; g++ for grpcio-sys's C++ wrapper; cmake for gRPC's C++ core and
# BoringSSL when they are built from source (`make static`, `make bench`,
# GRPC=vendored); clippy and rustfmt for `make lint`, etcd, ip and nsenter for the cluster tests
# and `make cluster-demo`, openssl for the certificates of the TLS tests,
# dockerd and a static busybox for the docker engine tests, the
# docker-compose and podman clients of the docker volume tests, promtool and
# prometheus for the metrics tests, OpenSSL's and zlib's headers for the
# artifact shim of the development build and of the fuzz crate, and
# systemd's tools for the systemd tests (systemd-analyze verify of the
# units, systemd-socket-activate handing the agent its sockets).
# Rust itself (>= 1.80, with cargo) must already be installed, e.g. by rustup.
set -eu

missing=""
# Whether a Debian package is installed. With another dpkg architecture
# added (scripts/test-arm64.sh adds arm64 and installs libgrpc-dev:arm64),
# a bare name that is installed for both is ambiguous and `dpkg -s` fails,
# so the host's own architecture is asked for then.
installed() {
    dpkg -s "$1" >/dev/null 2>&1 || dpkg -s "$1:$(dpkg --print-architecture)" >/dev/null 2>&1
}
# grpcio-sys links it through pkg-config under GRPCIO_SYS_USE_PKG_CONFIG=1
# (`make build` and every development target): no C++ core to compile.
installed libgrpc-dev || missing="$missing libgrpc-dev"
command -v pkg-config >/dev/null 2>&1 || missing="$missing pkg-config"
command -v cmake >/dev/null 2>&1 || missing="$missing cmake"
command -v g++ >/dev/null 2>&1 || missing="$missing g++"
command -v make >/dev/null 2>&1 || missing="$missing make"
# The cluster tests run real etcd members (Debian's etcd-server).
command -v etcd >/dev/null 2>&1 || missing="$missing etcd-server"
# Their hosts are network namespaces: ip makes them, nsenter runs the
# demo's processes in them.
command -v ip >/dev/null 2>&1 || missing="$missing iproute2"
command -v nsenter >/dev/null 2>&1 || missing="$missing util-linux"
# The docker engine tests run a private dockerd of their own (Debian's
# docker.io, which brings containerd and runc) and build their images
# offline from a static busybox: busybox-static's /bin/busybox runs in an
# image with no libc (Debian's plain busybox package is dynamic).
command -v dockerd >/dev/null 2>&1 || missing="$missing docker.io"
installed busybox-static || missing="$missing busybox-static"
# The docker volume tests drive the agent's volume plugin socket with the
# clients users have: Debian's docker-compose (Compose 1.29, which talks to
# the private dockerd through DOCKER_HOST) and podman (rootful, with a
# root, run root and containers.conf of the test's own).
command -v docker-compose >/dev/null 2>&1 || missing="$missing docker-compose"
# Podman's API service (podman system service, on a store of the test's
# own) also answers the volume plugin's reconciler tests.
command -v podman >/dev/null 2>&1 || missing="$missing podman"
# The TLS cluster tests make a CA and certificates with the openssl CLI,
# which a minimal Debian lacks.
command -v openssl >/dev/null 2>&1 || missing="$missing openssl"
# The metrics tests check the agent's /metrics with promtool and scrape it
# with a real prometheus server: both come in Debian's prometheus package.
command -v promtool >/dev/null 2>&1 || missing="$missing prometheus"
# The install test checks the units with systemd-analyze verify; the
# systemd tests start the agent on sockets systemd-socket-activate binds
# and hands it, as systemd's socket units do. Both come in Debian's
# systemd package (which a container image may lack; nothing here runs it
# as the init).
{ command -v systemd-analyze && command -v systemd-socket-activate; } >/dev/null 2>&1 ||
    missing="$missing systemd"
# The static binary's checks (scripts/static.sh -check, their tests, and
# test-arm64's e2e) ask file what a binary is.
command -v file >/dev/null 2>&1 || missing="$missing file"
# The start helper's test watches the agent's clones with strace.
command -v strace >/dev/null 2>&1 || missing="$missing strace"
# The artifact fetcher's C shim is compiled against the system's OpenSSL
# by the development build (which links it, with the system's gRPC) and by
# the fuzz crate (fuzz/, `make fuzz` and `make fuzz-check`); the builds of
# gRPC from source compile it against the BoringSSL they build. libgrpc-dev
# depends on both, named here for the fuzz crate's sake.
installed libssl-dev || missing="$missing libssl-dev"
installed zlib1g-dev || missing="$missing zlib1g-dev"
if [ -n "$missing" ]; then
    echo "installing:$missing"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
    echo "error: cargo not found: install Rust 1.80 or newer (https://rustup.rs)" >&2
    exit 1
fi
version=$(rustc --version | awk '{print $2}')
major=$(echo "$version" | cut -d. -f1)
minor=$(echo "$version" | cut -d. -f2)
if [ "$major" -lt 1 ] || { [ "$major" -eq 1 ] && [ "$minor" -lt 80 ]; }; then
    echo "error: rustc $version is too old: csi-agent needs 1.80 or newer" >&2
    exit 1
fi
for component in clippy rustfmt; do
    if ! cargo "$([ $component = rustfmt ] && echo fmt || echo clippy)" --version >/dev/null 2>&1; then
        if command -v rustup >/dev/null 2>&1; then
            rustup component add "$component"
        else
            echo "error: cargo $component is missing and rustup is not installed" >&2
            exit 1
        fi
    fi
done
if installed libsystemd-dev; then
    # Debian's gRPC core does not link libsystemd: only grpcio-sys's own
    # cmake build of it finds libsystemd-dev and links it.
    echo "warning: libsystemd-dev is installed: grpcio-sys's build of gRPC from source (make GRPC=vendored, make bench) would link libsystemd, which 'make build' refuses" >&2
fi
echo "build dependencies are present"
