#!/usr/bin/env bash
# The project's test command (README): every unit, integration, property and vector test of the
# workspace, then the doc tests. Installs what it needs first.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cargo build --workspace --locked --bins
cargo nextest run --workspace --locked --no-fail-fast
cargo test --workspace --locked --doc
