#!/usr/bin/env bash
# Installs what the build and the tests need on a fresh machine of this project's kind (Debian,
# Rust toolchain by rustup). Safe to run again; does nothing that is already done.
set -euo pipefail

need_apt=()
for tool in git python3 sh; do
    command -v "$tool" >/dev/null 2>&1 || need_apt+=("$tool")
done
# bubblewrap is only used by the sandbox benchmark for comparison.
command -v bwrap >/dev/null 2>&1 || need_apt+=(bubblewrap)
if [ "${#need_apt[@]}" -gt 0 ] && command -v apt-get >/dev/null 2>&1; then
    pkgs=()
    for t in "${need_apt[@]}"; do
        case "$t" in
            python3) pkgs+=(python3) ;;
            sh) pkgs+=(dash) ;;
            *) pkgs+=("$t") ;;
        esac
    done
    echo "setup: installing ${pkgs[*]}"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}") \
        || echo "setup: could not install ${pkgs[*]} (continuing; only benchmarks need bubblewrap)"
fi

if ! cargo nextest --version >/dev/null 2>&1; then
    echo "setup: installing cargo-nextest"
    cargo install cargo-nextest --locked
fi
