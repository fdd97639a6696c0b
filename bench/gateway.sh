#!/usr/bin/env bash
# Gateway benchmarks and their targets (figures go in docs/performance.md, "The gateway"):
#   one tools/call through `tether serve` vs direct, stdio and Streamable HTTP: p50 <= +1 ms, p99 <= +3 ms
#   the same side by side with one Python client over stdio (plain, and asking for progress) and
#   over Streamable HTTP: p50 <= +0.3 ms
#   tools/list over 16 servers at the gateway: <= 1.1x the slowest server's own tools/list
#   100 concurrent calls over 8 servers: none lost or cross-wired
#   the output budget: its check on a small result (~nothing), cutting a 10 MB result
#   the secret scan: its cost per tools/call result (1 line, 10 KB, 100 KB), in process
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --release -p tether-cli -p tether-test-mcp
unset TETHER_SERVER_URL TETHER_API_KEY TETHER_API_KEY_FILE RUST_LOG
cargo bench --quiet -p tether-gateway --bench gateway
python3 bench/gateway_side_by_side.py target/release/tether target/release/tether-test-mcp
python3 bench/gateway_side_by_side.py target/release/tether target/release/tether-test-mcp 2000 --progress
python3 bench/gateway_side_by_side.py target/release/tether target/release/tether-test-mcp 2000 --http
cargo bench --quiet -p tether-gateway --bench budget
cargo bench --quiet -p tether-scan --bench secret_scan
