#!/usr/bin/env bash
# The static musl build's workers under their seccomp allow-lists, from a dev build (no dist/):
# builds `hanzo-dev` for x86_64-unknown-linux-musl in debug (target/musl; or takes the binary as
# $1), then runs `doctor`, `run --demo` and `sandbox -- /bin/true` in tier A and tier B, also as
# uid 65534 when run as root. A syscall musl makes that a list refuses stops the worker with
# SIGSYS and fails a check here; the worker's stderr names the syscall and the list.
#
#   scripts/test-musl.sh            # build (a few minutes when cold), then check
#   scripts/test-musl.sh BINARY     # check a musl binary already built (e.g. the one in dist/)
#
# Needs the musl target and musl-gcc (scripts/setup-dist.sh installs both).
set -euo pipefail
cd "$(dirname "$0")/.."
musl=x86_64-unknown-linux-musl
if [ $# -ge 1 ]; then
    exe=$1
else
    command -v musl-gcc >/dev/null 2>&1 || { echo "test-musl: no musl-gcc (scripts/setup-dist.sh)" >&2; exit 2; }
    CARGO_TARGET_DIR="$(pwd)/target/musl" CC_x86_64_unknown_linux_musl=musl-gcc \
        cargo build --target "$musl" --bin hanzo-dev
    exe="$(pwd)/target/musl/$musl/debug/hanzo-dev"
fi
[ -x "$exe" ] || { echo "test-musl: $exe is not an executable" >&2; exit 2; }
work=$(mktemp -d /tmp/hanzo-test-musl-XXXXXX)
trap 'rm -rf "$work"' EXIT
failures=0
passed=0
check() {
    local what=$1; shift
    if "$@" >"$work/last.log" 2>&1; then
        printf 'ok    %s\n' "$what"; passed=$((passed + 1))
    else
        printf 'FAIL  %s\n' "$what"; failures=$((failures + 1))
        grep -h 'seccomp stopped the process' "$work/last.log" | sed 's/.*worker stderr: /      /' | sort -u | head -5 || true
        tail -10 "$work/last.log" | sed 's/^/      /'
    fi
}
# A worker stopped by its list is restarted by the supervisor, so a run can still end well:
# every check also requires that no worker was stopped.
clean() {
    local rc=0
    "$@" >"$work/out.log" 2>&1 || rc=$?
    cat "$work/out.log"
    ! grep -q 'seccomp stopped the process' "$work/out.log" && return $rc
}
demo() { clean "$@" run --demo && grep -q 'runs show' "$work/out.log"; }

run_all() {
    local who=$1; shift
    check "$who: doctor" clean "$@" doctor
    check "$who: run --demo" demo "$@"
    check "$who: sandbox (tier A) -- /bin/true" clean "$@" sandbox --isolation tier-a -- /bin/true
    check "$who: sandbox (tier B) -- /bin/true" clean "$@" sandbox --isolation strict -- /bin/true
}

check "statically linked" sh -c "file '$exe' | grep -q 'static'"
run_all "$(id -un)" "$exe"
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null 2>&1; then
    # An ordinary user: tier B from an unprivileged user namespace.
    userdir="$work/user"
    mkdir -p "$userdir/home" "$userdir/ws"
    chmod 0755 "$work" "$userdir"
    install -m 0755 "$exe" "$userdir/hanzo-dev"
    chown 65534:65534 "$userdir/home" "$userdir/ws"
    cat >"$work/as-nobody" <<EOF
#!/bin/sh
cd '$userdir/ws' && exec env -i PATH=/usr/local/bin:/usr/bin:/bin HOME='$userdir/home' \\
    setpriv --reuid 65534 --regid 65534 --clear-groups '$userdir/hanzo-dev' "\$@"
EOF
    chmod 0755 "$work/as-nobody"
    run_all "uid 65534" "$work/as-nobody"
fi
echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
