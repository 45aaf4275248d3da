#!/usr/bin/env bash
# `make test` RUNS times in a row (default 3) while a second build keeps
# every CPU busy, as a developer's other work or a shared CI machine does.
# A test that fails only under load has found a race: look for its cause
# in the product or the test, never retry it away.
#
# The load is a clone of this checkout's HEAD built over and over into a
# target dir of its own (its first build compiles the dependencies, the
# longest part), at normal priority, removed when this script ends. The
# first failing run stops the script with make's exit code; each run's
# output is kept in $LOGS (default a temporary directory, printed).
#
# Usage: scripts/test-under-load.sh   (as root, so root-only tests run)
set -euo pipefail
cd "$(dirname "$0")/.."

runs=${RUNS:-3}
load_dir=$(mktemp -d /tmp/csi-agent-load.XXXXXX)
logs=${LOGS:-$load_dir/logs}
mkdir -p "$logs"
git clone -q . "$load_dir/src"

# The load runs in a session of its own, so that one kill of its group
# ends the loop and the cargo and rustc processes under it.
setsid bash -c '
    cd "$1/src"
    while :; do
        CARGO_TARGET_DIR="$1/target" cargo build --locked -q >/dev/null 2>&1 || sleep 1
        rm -rf "$1/target"
    done' load "$load_dir" &
load=$!
cleanup() {
    kill -- "-$load" 2>/dev/null || true
    wait "$load" 2>/dev/null || true
    rm -rf "$load_dir/src" "$load_dir/target"
}
trap cleanup EXIT

for run in $(seq 1 "$runs"); do
    start=$SECONDS
    echo "== run $run of $runs (load average: $(cut -d' ' -f1-3 /proc/loadavg)), output in $logs/run-$run.log"
    if ! make test >"$logs/run-$run.log" 2>&1; then
        echo "run $run failed after $((SECONDS - start)) s:" >&2
        grep -E '^test .* FAILED|^failures:|panicked' "$logs/run-$run.log" | head -40 >&2 || true
        exit 1
    fi
    echo "== run $run passed in $((SECONDS - start)) s"
done
echo "all $runs runs passed under load"
