#!/usr/bin/env bash
# Installs what scripts/dist.sh and scripts/test-dist.sh need beyond scripts/setup.sh: the musl
# target and C compiler (the static build), maturin (the wheels), cargo-deb (the Debian package),
# `file` (the static-link check), hyperfine (start-up figures) and systemd-analyze (the unit's lint
# and exposure score), when the machine's package manager has it. Safe to run again; quiet when
# everything is already there.
set -euo pipefail

MATURIN_VERSION=1.16.0
CARGO_DEB_VERSION=3.8.0
musl=x86_64-unknown-linux-musl

need_apt=()
command -v musl-gcc >/dev/null 2>&1 || need_apt+=(musl-tools)
command -v file >/dev/null 2>&1 || need_apt+=(file)
command -v hyperfine >/dev/null 2>&1 || need_apt+=(hyperfine)
command -v unshare >/dev/null 2>&1 || need_apt+=(util-linux)
command -v dpkg-deb >/dev/null 2>&1 || need_apt+=(dpkg)
# systemd-analyze ships with systemd on Debian 12; it is only needed to lint the unit, so its
# absence is reported by test-dist.sh rather than treated as an error here.
command -v systemd-analyze >/dev/null 2>&1 || need_apt+=(systemd)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
python3 -m venv --help >/dev/null 2>&1 || need_apt+=(python3-venv)
if [ "${#need_apt[@]}" -gt 0 ]; then
    if command -v apt-get >/dev/null 2>&1; then
        echo "setup-dist: installing ${need_apt[*]}"
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}") ||
            echo "setup-dist: could not install ${need_apt[*]}; dist.sh/test-dist.sh will name what is missing" >&2
    else
        echo "setup-dist: no apt-get; install ${need_apt[*]} by hand" >&2
    fi
fi

if ! rustup target list --installed | grep -qx "$musl"; then
    echo "setup-dist: adding the Rust target $musl"
    rustup target add "$musl"
fi

if ! maturin --version 2>/dev/null | grep -q " $MATURIN_VERSION\$"; then
    echo "setup-dist: installing maturin $MATURIN_VERSION"
    python3 -m pip install --quiet --disable-pip-version-check "maturin==$MATURIN_VERSION"
fi

if ! cargo deb --version 2>/dev/null | grep -q "$CARGO_DEB_VERSION"; then
    echo "setup-dist: installing cargo-deb $CARGO_DEB_VERSION"
    cargo install --locked --quiet cargo-deb --version "$CARGO_DEB_VERSION"
fi

command -v npm >/dev/null 2>&1 || { echo "setup-dist: npm is required for the npm packages (apt-get install npm)" >&2; exit 1; }
