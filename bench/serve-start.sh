#!/usr/bin/env bash
# Time to the `initialize` answer of `tether serve` (stdio) in front of ten server-everything
# (stdio, from .cache/npm) and one tether-test-mcp whose initialize takes 20 s (--slow-start,
# a fixed delay: fine for a benchmark), paired in one run, ROUNDS rounds (default 3):
#   default (servers join when ready): the initialize answer, then the slow server's tools
#     in a tools/list (after its notifications/tools/list_changed);
#   --wait-for-servers: the initialize answer (after every server started), the first list;
#   baseline: --wait-for-servers with a fast test server in the slow one's place.
# Targets: default initialize well under 1 s; --wait-for-servers bounded by the slowest server.
# Figures go in docs/performance.md, "Time to initialize". Debug build: the servers' own
# start dominates.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3}
cargo build --quiet -p tether-cli -p tether-test-mcp
tether=$PWD/target/debug/tether
test_mcp=$PWD/target/debug/tether-test-mcp
everything=$PWD/.cache/npm/node_modules/.bin/mcp-server-everything
test -x "$everything" || { echo "no $everything: install crates/tether-testkit/npm-packages.txt" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export TETHER_HOME=$work/home NO_COLOR=1
unset TETHER_SERVER_URL TETHER_API_KEY TETHER_API_KEY_FILE RUST_LOG

ten=$(for i in $(seq 1 10); do printf '"ev%d": {"command": "%s", "args": ["stdio"]}, ' "$i" "$everything"; done)
printf '{"mcpServers": {%s"slow": {"command": "%s", "args": ["--slow-start", "20000"]}}}' "$ten" "$test_mcp" > "$work/mcp.json"
# The ten alone (with a fast test server in the slow one's place), for the baseline.
printf '{"mcpServers": {%s"slow": {"command": "%s"}}}' "$ten" "$test_mcp" > "$work/fast.json"

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# One `tether serve` of the spec file $1 with flags "${@:2}": prints "INITIALIZE_MS SLOW_TOOLS_MS" — when the
# initialize answer came, and when a tools/list first held the slow server's tools (asked
# after each notifications/tools/list_changed; with --wait-for-servers, the first one).
measure() {
  local spec=$1 start initialized listed id=1 line
  shift
  start=$(now_ms)
  coproc SERVE { exec "$tether" serve --mcp "$spec" "$@" 2>>"$work/stderr"; }
  printf '%s\n' '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}' >&"${SERVE[1]}"
  read -r line <&"${SERVE[0]}"
  initialized=$(now_ms)
  case $line in *'"id":1'*) ;; *) echo "unexpected answer: $line" >&2; exit 1 ;; esac
  printf '%s\n' '{"jsonrpc":"2.0","method":"notifications/initialized"}' >&"${SERVE[1]}"
  while :; do
    id=$((id + 1))
    printf '{"jsonrpc":"2.0","id":%d,"method":"tools/list"}\n' "$id" >&"${SERVE[1]}"
    while read -r -t 120 line <&"${SERVE[0]}"; do
      case $line in *"\"id\":$id"*) break ;; esac
    done
    case $line in *slow__echo*) break ;; esac
    # Not yet: wait for the next list change.
    while read -r -t 120 line <&"${SERVE[0]}"; do
      case $line in *'notifications/tools/list_changed'*) break ;; esac
    done
  done
  listed=$(now_ms)
  exec {SERVE[1]}>&-
  wait "$SERVE_PID" || true
  echo "$(( initialized - start )) $(( listed - start ))"
}

for round in $(seq 1 "$rounds"); do
  read -r d_init d_slow < <(measure "$work/mcp.json")
  read -r w_init w_slow < <(measure "$work/mcp.json" --wait-for-servers)
  read -r b_init _ < <(measure "$work/fast.json" --wait-for-servers)
  echo "round $round: default: initialize ${d_init} ms, slow server's tools listed ${d_slow} ms | --wait-for-servers: initialize ${w_init} ms, tools listed ${w_slow} ms | without the slow server, --wait-for-servers: initialize ${b_init} ms"
done
