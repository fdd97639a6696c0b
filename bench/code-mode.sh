#!/usr/bin/env bash
# Code mode's figures (docs/performance.md, "Code mode"); the targets are in the bench's header
# (crates/tether-gateway/benches/code_mode.rs): >= 90% less context on three tasks, engine
# start p50 <= 5 ms, a scripted call <= +0.3 ms over a direct one, eight 300 ms calls in
# <= 1.2 s, <= 70 MiB per concurrent run.
set -euo pipefail
cd "$(dirname "$0")/.."
npm_prefix="target/bench-npm"
mkdir -p "$npm_prefix"
npm install --silent --no-audit --no-fund --prefix "$npm_prefix" \
    @modelcontextprotocol/server-filesystem@2026.8.31 \
    @modelcontextprotocol/server-everything@2026.8.31
cargo build --quiet --release -p tether-cli -p tether-test-mcp
unset TETHER_SERVER_URL TETHER_API_KEY TETHER_API_KEY_FILE RUST_LOG
TETHER_BENCH_NPM="$PWD/$npm_prefix" cargo bench --quiet -p tether-gateway --bench code_mode
