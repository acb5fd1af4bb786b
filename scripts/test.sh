#!/usr/bin/env bash
# The project's test command (README): every unit, integration, property and vector test of the
# workspace, and the doc tests. Installs what it needs first.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cargo test --workspace --locked --doc
cargo nextest run --workspace --locked --no-fail-fast
