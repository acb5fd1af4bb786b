#!/usr/bin/env bash
# The main job (README): build hanzo-dev, then show on this machine what the kernel offers and
# every worker started, confined, attested and probed from the inside, with a round trip to each.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cargo build --release --locked -p hanzo-dev
./target/release/hanzo-dev doctor "$@"
