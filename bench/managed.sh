#!/usr/bin/env bash
# Managed resolution against the real server (figures go in docs/performance.md,
# "Managed resolution and startup"):
# 32 managed uids resolved through tether-server behind a 50 ms loopback delay, batched vs one
# operation per uid, 256 uids batched, and the release `tether` binary exporting 32 UUIDs
# through the same delay. Targets: 32 uids <= one uid + 20 ms in <= 2 requests; 256 uids <=
# one uid + 60 ms.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --release -p tether-cli
TETHER_BIN=$PWD/target/release/tether cargo bench --quiet -p tether-server --bench managed_latency
