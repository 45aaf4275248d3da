#!/bin/sh
# The linker of the static binary's final link (scripts/static.sh passes it
# to rustc for the csi-agent binary alone): zig links as cargo-zigbuild has
# it do, then lld links the same inputs again with identical code folding,
# which zig's `cc` front end does not let through (`-Wl,--icf=...` is an
# "unsupported linker arg" to it). Folding merges the many functions of
# gRPC's C++ templates that compile to the same bytes. BENCHMARKS.md's P5
# note has what each option saves.
#
# --icf=safe folds only the sections an object's address-significance
# table (.llvm_addrsig) leaves out: functions whose address is never taken
# or compared. clang (zig) writes that table for the C and C++ code, so
# code that compares function pointers, as abseil and gRPC do, keeps
# distinct addresses; rustc writes none, so lld folds no Rust code (LLVM
# already merged identical Rust functions under LTO). --icf=all would fold
# address-taken functions too, and is not used. (lld reads the tables of
# the few objects cc-rs builds, zlib's and the C shims, as unusable, and
# folds nothing of theirs.) -O2 adds lld's string tail merging.
#
# A change to this script does not make cargo link again: touch
# src/main.rs before `make static`.
#
# Environment (set by scripts/static.sh):
#   STATIC_LINK_TARGET  the Rust target, e.g. x86_64-unknown-linux-musl
#   STATIC_LINK_ICF     safe (the default) or none: zig's link alone
set -eu

fail() {
    echo "static-link: $*" >&2
    exit 1
}

target=${STATIC_LINK_TARGET:?not set: run through scripts/static.sh}
icf=${STATIC_LINK_ICF:-safe}
case "$icf" in
safe | none) ;;
*) fail "STATIC_LINK_ICF must be safe or none, not '$icf'" ;;
esac
# cargo-zigbuild's `zig cc` wrapper for the target, which it also gives
# the build scripts (cc-rs reads CC_<target>).
cc_var=CC_$(printf %s "$target" | tr - _)
eval "cc=\${$cc_var:-}"
[ -n "$cc" ] || fail "$cc_var is not set: run through cargo-zigbuild (scripts/static.sh)"
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# zig prints the lld commands it runs when ZIG_VERBOSE_LINK is set (and
# `ar rcs` ones, when it first builds its libc++ and libunwind): they are
# kept out of what the build shows.
status=0
ZIG_VERBOSE_LINK=1 "$cc" "$@" 2>"$log" || status=$?
grep -v -e '^ld\.lld ' -e '^ar rcs ' "$log" >&2 || true
[ "$status" -eq 0 ] || exit "$status"
[ "$icf" != none ] || exit 0

# The last one is the link itself; `ld.lld -r` ones before it, when zig
# first builds its C runtime objects, are not.
line=$(grep '^ld\.lld ' "$log" | grep -v '^ld\.lld -r ' | tail -n 1)
[ -n "$line" ] || fail "zig printed no ld.lld command to fold with"
# The command as zig printed it: words separated by single spaces, with no
# quoting, which holds while no path in it (the target directory, rustc's
# temporary objects, zig's cache) has a space or a quote in it.
case "$line" in
*'  '* | *'"'* | *"'"* | *\\*) fail "cannot split zig's lld command into its words: $line" ;;
esac
set -f
# shellcheck disable=SC2086
set -- ${line#ld.lld }
rm -f "$log"
# -O2 also merges string constants that are the tail of another.
exec python-zig ld.lld "$@" --icf="$icf" -O2
