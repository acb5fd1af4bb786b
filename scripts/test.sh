#!/usr/bin/env bash
# The project's test command (README): every unit, integration, property and vector test of the
# workspace, and the doc tests. Installs what it needs first.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# nextest first, then the doc tests with the same profile (test) and the same workspace-wide feature
# resolution, so the doc tests reuse the libraries nextest built instead of building them again.
status=0
cargo nextest run --workspace --locked --no-fail-fast || status=$?
cargo test --workspace --locked --doc || status=$?
exit "$status"
