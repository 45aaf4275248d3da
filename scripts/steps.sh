# Sourced by the scripts that run in named steps (e2e.sh, e2e-docker.sh,
# upgrade-fixture.sh): `step NAME` says what the script is doing now, and a
# failure, by `fail` or by a command outside it, names that step. The
# sourcing script sets `script_name` (for its messages) first. Also the
# helpers they share: `wait_until` and `mounts_under`.

current_step="preflight"

# `step NAME`: what the script is doing now; a failure names it.
step() {
    current_step=$1
    if [ -t 1 ]; then
        printf '\033[1m==> %s\033[0m\n' "$current_step"
    else
        printf '==> %s\n' "$current_step"
    fi
}

fail() {
    echo "$script_name: FAILED in step '$current_step': $*" >&2
    exit 1
}

# A command that fails outside `fail`: name the step, the command and the
# script's line (the outermost call, when it failed inside a function).
on_error() {
    local code=$1 command=$2 line=${BASH_LINENO[${#BASH_LINENO[@]} - 2]}
    # Subshells inherit the trap (set -E); report once, from the script.
    if [ "$BASHPID" = "$$" ]; then
        echo "$script_name: FAILED in step '$current_step': line $line: $command (exit $code)" >&2
    fi
}
trap 'on_error "$?" "$BASH_COMMAND"' ERR

# `wait_until SECONDS CMD...`: runs CMD every 0.1 s until it succeeds;
# fails (status 1) once SECONDS have passed.
wait_until() {
    local deadline=$((SECONDS + $1))
    shift
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.1
    done
}

# `mounts_under DIR`: the mount points at or under DIR, deepest first.
mounts_under() {
    awk -v d="$1" '$5 == d || index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r
}
