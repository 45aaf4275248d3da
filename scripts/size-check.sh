#!/usr/bin/env bash
# Fails when a file is larger than its size budget, and says by how much.
# `make static-check` runs it on the static binary with STATIC_BUDGET,
# 8 MiB (row P5 of BENCHMARKS.md).
#
# Usage: scripts/size-check.sh FILE BUDGET   (BUDGET in bytes)
set -euo pipefail

fail() {
    echo "error: $*" >&2
    exit 1
}

[ $# -eq 2 ] || fail "usage: scripts/size-check.sh FILE BUDGET (bytes)"
file=$1
budget=$2
[[ $budget =~ ^[0-9]+$ ]] || fail "the size budget must be a number of bytes, not '$budget'"
[ -f "$file" ] || fail "no file at $file"
size=$(stat -c %s "$file")
if [ "$size" -gt "$budget" ]; then
    fail "$file is $size bytes, over its size budget of $budget bytes by $((size - budget))"
fi
echo "$file: $size bytes, within its size budget of $budget bytes ($((budget - size)) to spare)"
