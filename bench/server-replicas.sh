#!/usr/bin/env bash
# Replica figures (docs/performance.md, "Replicas on PostgreSQL"): createManagedMcpClientConfig from 50
# clients against tether-server on SQLite, one PostgreSQL replica and two replicas on the same
# PostgreSQL; then SIGKILL of one replica under load. Needs PostgreSQL's server binaries
# (Debian: apt-get install postgresql); the bench starts a throwaway cluster and removes it.
# Also runs the single-server load bench (proxy overhead, SIGKILL + restart on SQLite).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench --quiet -p tether-server --bench replicas
cargo bench --quiet -p tether-server --bench load
