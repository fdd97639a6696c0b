#!/usr/bin/env bash
# Tool search benchmarks (figures go in docs/performance.md, "Tool search"):
#   find over 1,000+ tools in process: p50 and p99 per request (plain BM25, + related terms, fused with the semantic stage)
#   building the index (every change of the offered set in search mode: BM25 and each tool's vector)
#   tools/list bytes through `tether serve`, 10 × server-everything + test server, all vs search
#   tether__find_tools through the gateway
# The ranking quality table is a test: cargo test -p tether-gateway --test search_quality -- --nocapture
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --release -p tether-cli -p tether-test-mcp
unset TETHER_SERVER_URL TETHER_API_KEY TETHER_API_KEY_FILE RUST_LOG
cargo bench --quiet -p tether-gateway --bench tool_search
cargo test --quiet -p tether-gateway --test search_quality -- --nocapture
