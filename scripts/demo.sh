#!/usr/bin/env bash
# The main job (README): build hanzo-dev, then run the offline demo — an example project copied
# to a temporary workspace and an agent run against a recorded model, through the real workers,
# sandbox, policy and run store. Extra arguments go to `hanzo-dev run --demo` (e.g. --json).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cargo build --release --locked -p hanzo-dev
status=0
./target/release/hanzo-dev run --demo "$@" || status=$?
# `hanzo-dev` is not on PATH after this script alone; say where it is, so the command the demo's
# last line names can be run.
echo "The binary is $PWD/target/release/hanzo-dev: run it by that path, put target/release on" \
    "PATH, or install it with \`cargo install --path supervisor --locked\`." >&2
exit "$status"
