#!/usr/bin/env bash
# The main job (README): build hanzo-dev, then run the offline demo — an example project copied
# to a temporary workspace and an agent run against a recorded model, through the real workers,
# sandbox, policy and run store. Extra arguments go to `hanzo-dev run --demo` (e.g. --json).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cargo build --release --locked -p hanzo-dev
./target/release/hanzo-dev run --demo "$@"
