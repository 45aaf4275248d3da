# csi-agent: build, test and install.
#
# Everything but `make static` and `make bench` uses cargo's dev profile,
# whose dependencies are compiled optimised (see Cargo.toml), shared by
# build, test, lint, demo and e2e. By default (GRPC=system) it links the
# system's gRPC core and OpenSSL (Debian's libgrpc-dev, which `make deps`
# installs) through pkg-config, so no C++ is compiled: a first build takes
# minutes. GRPC=vendored builds gRPC's C++ core and BoringSSL from source
# instead, as the shipped binary has them (15-25 minutes on two cores, once).
# `make static` always builds from source, as a release build for musl, and
# so does `make bench`, in the optimised bench profile; each compiles gRPC
# once more.

# Where `make install` puts things (see scripts/install.sh): the binary in
# $(PREFIX)/bin, the units (csi-agent.service, csi-agent-control.socket,
# csi-agent.socket) in $(UNITDIR), the config in $(SYSCONFDIR)/csi-agent.
PREFIX     ?= /usr/local
DESTDIR    ?=
SYSCONFDIR ?= /etc
UNITDIR    ?= $(PREFIX)/lib/systemd/system
CARGO      ?= cargo
DEBUG_BIN  := target/debug/csi-agent
# The architecture `make static` builds for: x86_64 or aarch64 (64-bit
# ARM, cross-compiled). STATIC_BIN is where that binary lands.
ARCH       ?= x86_64
STATIC_BIN := target/$(ARCH)-unknown-linux-musl/static/csi-agent
# The static binary's size budget in bytes, 8 MiB for either architecture
# (BENCHMARKS.md, row P5): `make static-check` (CI) fails above it. The
# x86_64 binary is the larger (the same Rust compiles to about 1.4 times
# the bytes of aarch64 code) and has the less room: 7.97 MiB at 165c104.
STATIC_BUDGET ?= 8388608
# Where the dev profile's gRPC core comes from: "system" (Debian's
# libgrpc-dev through pkg-config, with the system's OpenSSL) or "vendored"
# (grpcio-sys builds gRPC 1.56 and BoringSSL from source). Both set
# grpcio-sys's own switch, GRPCIO_SYS_USE_PKG_CONFIG, for every recipe;
# .cargo/config.toml makes "1" the default of a plain `cargo build` too.
# Switching rebuilds grpcio-sys and what depends on it in target/.
GRPC ?= system
ifeq ($(GRPC),system)
export GRPCIO_SYS_USE_PKG_CONFIG := 1
else ifeq ($(GRPC),vendored)
export GRPCIO_SYS_USE_PKG_CONFIG := 0
else
$(error GRPC must be "system" or "vendored", not "$(GRPC)")
endif
# The binary install, install-test and e2e use: the debug build, which they
# build first, unless BIN names another (BIN=$(STATIC_BIN) after `make static`).
BIN        ?= $(DEBUG_BIN)
NEEDS_BUILD := $(if $(filter $(DEBUG_BIN),$(BIN)),build)
# How long `make fuzz` runs each target, in seconds, and which targets
# (all of them unless FUZZ_TARGETS names some, e.g. FUZZ_TARGETS="json regex").
FUZZ_TIME ?= 300
FUZZ_TARGETS ?= hcl_parse template json regex archive http_response
# Where `make docker-plugin` writes the managed Docker plugin's directory,
# and the binary it puts in it: the static one unless BIN names another
# (a dynamic one, such as $(DEBUG_BIN), brings its shared libraries).
DEST       ?= target/docker-plugin
PLUGIN_BIN := $(if $(filter command line environment,$(origin BIN)),$(BIN),$(STATIC_BIN))
# The format version `make upgrade-fixture` writes a fixture for:
# tests/fixtures/datadir-$(FIXTURE_VERSION).
FIXTURE_VERSION ?= v1
# Arguments of the benchmark program, e.g. BENCH_ARGS="--only P1 --runs 50"
# (`make bench BENCH_ARGS=--help` lists them).
BENCH_ARGS ?=

.PHONY: all help deps grpc-check build static static-check docker-plugin test-arm64 test test-load lint bench demo cluster-demo e2e fuzz fuzz-check upgrade-fixture install uninstall install-test clean

all: build

## help: these lines: every target and what it does
help:
	@awk '/^## / { sub(/^## /, in_block ? "    " : ""); print; in_block = 1; next } { in_block = 0 }' $(firstword $(MAKEFILE_LIST))

## deps: install what the build and tests need on Debian (cmake, g++, etcd, ip,
## nsenter; clippy, rustfmt)
deps:
	@scripts/deps.sh

## build: the csi-agent binary, checked not to link libsystemd; GRPC=vendored
## builds gRPC's C++ core and BoringSSL from source rather than linking the
## system's (GRPC=system, the default)
build: grpc-check
	$(CARGO) build --locked
	@if ldd $(DEBUG_BIN) | grep -q libsystemd; then \
		echo "error: $(DEBUG_BIN) links libsystemd (grpcio-sys found libsystemd-dev); remove libsystemd-dev and run 'cargo clean -p grpcio-sys'" >&2; \
		exit 1; \
	fi

# With GRPC=system, that pkg-config finds the system's gRPC core before cargo
# starts, rather than grpcio-sys's panic in the middle of the build.
grpc-check:
	@if [ '$(GRPC)' = system ] && ! pkg-config --exists grpc; then \
		echo "error: pkg-config finds no grpc: run 'make deps' (Debian's libgrpc-dev), or build gRPC from source with GRPC=vendored" >&2; \
		exit 1; \
	fi

## static: a fully static, stripped musl binary for ARCH (x86_64, or
## aarch64: `make static ARCH=aarch64`), $(STATIC_BIN), built with zig
## through cargo-zigbuild (both installed from PyPI when missing), with
## gRPC's C++ core and BoringSSL built from source whatever GRPC says
static:
	ARCH='$(ARCH)' scripts/static.sh

## docker-plugin: the managed Docker plugin's directory, $(DEST)
## (config.json and rootfs/), for `docker plugin create csi $(DEST)`, offline;
## with the static binary $(STATIC_BIN) (`make static` first), or BIN=
## (scripts/docker-plugin.sh; see docs/docker-volumes.md)
docker-plugin:
	BIN='$(PLUGIN_BIN)' DEST='$(DEST)' scripts/docker-plugin.sh

## test-arm64: as root, under qemu-user through binfmt_misc (both set up
## when missing): the unit tests built for aarch64 against Debian's arm64
## gRPC core, then scripts/e2e.sh with the aarch64 static binary (`make
## static ARCH=aarch64` first) (scripts/test-arm64.sh)
test-arm64:
	scripts/test-arm64.sh

## static-check: that $(STATIC_BIN) (after `make static`) is fully static,
## stripped, and at most STATIC_BUDGET bytes (8 MiB); CI runs it for
## x86_64, then the end-to-end checks with that binary
static-check:
	scripts/static.sh -check $(STATIC_BIN)
	scripts/size-check.sh $(STATIC_BIN) $(STATIC_BUDGET)

## test: lint, then every unit and integration test of the agent and of
## every crate of the workspace (root-only tests need root)
test: build lint
	$(CARGO) test --locked --workspace

## test-load: as root, `make test` RUNS times in a row (3) while a second
## build of this checkout keeps the CPUs busy (scripts/test-under-load.sh)
test-load:
	scripts/test-under-load.sh

## lint: formatting and clippy with warnings as errors, the agent and
## every crate of the workspace
lint: grpc-check
	$(CARGO) fmt --all --check
	$(CARGO) clippy --locked --workspace --all-targets -- -D warnings

## bench: the performance table of BENCHMARKS.md (root; optimised bench
## profile, whose first build compiles gRPC's C++ core once more: always
## from source, whatever GRPC says, so that it measures the gRPC and
## BoringSSL the shipped binary has)
bench:
	GRPCIO_SYS_USE_PKG_CONFIG=0 $(CARGO) bench --locked --bench agent -- $(BENCH_ARGS)

## demo: `agent -dev`, then claim the volume demo with -target, write a file, release it
demo: build
	scripts/demo.sh $(DEBUG_BIN)

## cluster-demo: as root, three hosts on one machine (network namespaces on a
## bridge), a 3-member etcd and an agent with a hostpath plugin on each: node
## status from every host, then one single-writer volume claimed from all three
## at once, which one must win (scripts/cluster-demo.sh; everything is removed)
cluster-demo: build
	scripts/cluster-demo.sh $(DEBUG_BIN)

## e2e: as root, the install test, then the agent, the hostpath plugin and the
## CLI end to end with real mounts (scripts/e2e.sh), and the same with the
## plugin and a workload run from images by a private dockerd, then $(BIN)
## as a managed Docker plugin of that dockerd (scripts/e2e-docker.sh),
## against $(BIN)
e2e: install-test
	BIN='$(BIN)' scripts/e2e.sh
	BIN='$(BIN)' scripts/e2e-docker.sh

## fuzz: fuzz each of FUZZ_TARGETS (the HCL parsers, the template engine, the
## JSON reader, the regex engine, the archive readers, the HTTP client's
## reading of answers) for FUZZ_TIME seconds, one after the other, at the
## lowest priority and on one core, each seeded from the fixtures and the
## external corpora under tests/corpora (scripts/fuzz-seeds.sh); cargo-fuzz
## on nightly, both installed when missing; not part of `test` or CI
fuzz:
	@rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
	@command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	scripts/fuzz-seeds.sh $(FUZZ_TARGETS)
	@set -e; for target in $(FUZZ_TARGETS); do \
		echo "== fuzzing $$target for $(FUZZ_TIME) s"; \
		nice -n 19 $(CARGO) +nightly fuzz run $$target -- \
			-max_total_time=$(FUZZ_TIME) -max_len=4096 -timeout=10; \
	done

## fuzz-check: that every fuzz target still compiles (a plain nightly
## `cargo check` of fuzz/, about half a minute of CPU; CI runs it), skipped
## with a note where no nightly toolchain is installed
fuzz-check:
	@if rustup toolchain list | grep -q '^nightly'; then \
		$(CARGO) +nightly check --locked --manifest-path fuzz/Cargo.toml --bins; \
	else \
		echo "fuzz-check: skipped, no nightly toolchain (rustup toolchain install nightly)"; \
	fi

## upgrade-fixture: as root, the data dirs $(BIN) leaves for the upgrade test
## (scripts/upgrade-fixture.sh), in tests/fixtures/datadir-$(FIXTURE_VERSION); only
## for a new state format, see docs/development.md
upgrade-fixture: $(NEEDS_BUILD)
	BIN='$(BIN)' FIXTURE_VERSION='$(FIXTURE_VERSION)' scripts/upgrade-fixture.sh

INSTALL_ENV = BIN='$(BIN)' PREFIX='$(PREFIX)' DESTDIR='$(DESTDIR)' \
	SYSCONFDIR='$(SYSCONFDIR)' UNITDIR='$(UNITDIR)'

## install: $(BIN) as $(DESTDIR)$(PREFIX)/bin/csi-agent, the systemd units
## (csi-agent.service, Type=notify, and its sockets csi-agent-control.socket
## and csi-agent.socket), and a default /etc/csi-agent/agent.hcl unless one exists
install: $(NEEDS_BUILD)
	@$(INSTALL_ENV) scripts/install.sh install

## uninstall: the binary and the units; the config only if it is the default
uninstall:
	@$(INSTALL_ENV) scripts/install.sh uninstall

## install-test: install, reinstall and uninstall into a temporary DESTDIR,
## checking every file, and the units with systemd-analyze verify
install-test: $(NEEDS_BUILD)
	BIN='$(BIN)' scripts/install-test.sh

clean:
	$(CARGO) clean
