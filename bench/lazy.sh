#!/usr/bin/env bash
# What `--lazy` saves: `tether serve` (stdio) in front of ten server-everything (stdio, from
# .cache/npm) whose tools were pinned by an earlier run; a client initializes, lists the tools
# and calls one tool of one server (ev1__echo), then closes. Paired in one run, ROUNDS rounds
# (default 3), each arm in turn:
#   default: every server starts with the gateway (answered at once; ev1 joins when ready);
#   --lazy:  only ev1 starts, when the call names it.
# Prints per arm: wall time from the start of `tether serve` to the call's answer, and how many
# servers were started (each server is a wrapper that notes its start in a file, then execs
# server-everything). Figures go in docs/performance.md, "Lazy start".
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3}
cargo build --quiet -p tether-cli
tether=$PWD/target/debug/tether
everything=$PWD/.cache/npm/node_modules/.bin/mcp-server-everything
test -x "$everything" || { echo "no $everything: install crates/tether-testkit/npm-packages.txt" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export TETHER_HOME=$work/home NO_COLOR=1
unset TETHER_SERVER_URL TETHER_API_KEY TETHER_API_KEY_FILE RUST_LOG
printf '#!/bin/sh\necho start >> %s/starts\nexec %s "$@"\n' "$work" "$everything" > "$work/everything"
chmod +x "$work/everything"
ten=$(for i in $(seq 1 10); do printf '"ev%d": {"command": "%s", "args": ["stdio"]}' "$i" "$work/everything"; if [ "$i" -lt 10 ]; then printf ', '; fi; done)
printf '{"mcpServers": {%s}}' "$ten" > "$work/mcp.json"

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# One session against `tether serve FLAGS`: prints "CALL_MS STARTED".
session() {
  local start answered line
  : > "$work/starts"
  start=$(now_ms)
  coproc SERVE { exec "$tether" serve --mcp "$work/mcp.json" "$@" 2>>"$work/stderr"; }
  {
    printf '%s\n' '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}'
    printf '%s\n' '{"jsonrpc":"2.0","method":"notifications/initialized"}'
    printf '%s\n' '{"jsonrpc":"2.0","id":2,"method":"tools/list"}'
    printf '%s\n' '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"ev1__echo","arguments":{"message":"hi"}}}'
  } >&"${SERVE[1]}"
  while read -r -t 120 line <&"${SERVE[0]}"; do
    case $line in *'"id":3'*) break ;; esac
  done
  answered=$(now_ms)
  case $line in *'Echo: hi'*) ;; *) echo "unexpected answer: $line" >&2; exit 1 ;; esac
  exec {SERVE[1]}>&-
  wait "$SERVE_PID" || true
  echo "$(( answered - start )) ms, $(wc -l < "$work/starts") started"
}

# Pin the ten servers' tools once (every server started: --wait-for-servers).
session --wait-for-servers > /dev/null
grep -c '"sha256"' "$TETHER_HOME/pins.json" | xargs echo "pinned tools:"
for round in $(seq 1 "$rounds"); do
  echo "round $round: default $(session) | lazy $(session --lazy)"
done
echo "(load average: $(cut -d' ' -f1-3 /proc/loadavg))"
