#!/usr/bin/env bash
# The official MCP conformance suite (server scenarios) against server-everything directly and
# through `tether serve --listen` in front of it; fails when a scenario that passes directly
# fails through the gateway. Needs npm (Node 22 comes from the npm registry as `node@22`).
#   specs/gateway/conformance.sh            # prints both summaries and the comparison
# TETHER_BIN=PATH uses that tether instead of building one (.ci/run passes the one its tests
# built, so nothing is built twice).
set -euo pipefail
cd "$(dirname "$0")/../.."
prefix=$PWD/.cache/conformance
# The registry can fail a request now and then: three tries.
for attempt in 1 2 3; do
  test -x "$prefix/node_modules/.bin/conformance" && break
  npm install --no-audit --no-fund --loglevel=error --prefix "$prefix" \
    node@22.23.3 @modelcontextprotocol/conformance@0.1.16 >&2 || sleep $(( attempt * 10 ))
done
test -x "$prefix/node_modules/.bin/conformance" || { echo "npm could not install the conformance suite" >&2; exit 1; }
export PATH=$prefix/node_modules/.bin:$PATH
everything=$PWD/.cache/npm/node_modules/.bin/mcp-server-everything
test -x "$everything" || { echo "install the test npm packages first (.ci/run or any cargo test that needs them)" >&2; exit 2; }
tether=${TETHER_BIN:-}
if test -z "$tether"; then
  cargo build --quiet -p tether-cli
  tether=target/debug/tether
fi
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$work"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(free_port)
PORT=$port "$everything" streamableHttp > "$work/everything.log" 2>&1 & pids+=($!)
for _ in $(seq 1 100); do (echo > /dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.1; done
TETHER_HOME=$work/home "$tether" serve --no-pins \
  --mcp "{\"everything\":{\"url\":\"http://127.0.0.1:$port/mcp\"}}" \
  --listen 127.0.0.1:0 --no-auth > "$work/gateway.out" 2> "$work/gateway.err" & pids+=($!)
for _ in $(seq 1 100); do test -s "$work/gateway.out" && break; sleep 0.1; done
gateway=$(sed -n 's/^listening on //p' "$work/gateway.out")
summary() { conformance server --url "$1" -o "$work/$2" 2>&1 | sed -n '/=== SUMMARY ===/,$p' | grep -E '^[✓✗]' | sort; }
summary "http://127.0.0.1:$port/mcp" direct > "$work/direct.txt" || true
summary "$gateway" gateway > "$work/gateway.txt" || true
echo "== server-everything directly"; cat "$work/direct.txt"
# A suite that ran nothing must not pass the comparison below by having nothing to compare.
grep -q '^✓' "$work/direct.txt" || { echo "the suite passed no scenario against server-everything directly: it did not run" >&2; exit 1; }
echo "== through tether serve"; cat "$work/gateway.txt"
lost=$(grep '^✓' "$work/direct.txt" | cut -d: -f1 | sed 's/^✓ //' | while read -r scenario; do
  grep -q "^✓ $scenario:" "$work/gateway.txt" || echo "$scenario"; done)
if test -n "$lost"; then
  echo "== passes directly but not through the gateway:"; echo "$lost"; exit 1
fi
echo "== every scenario server-everything passes also passes through the gateway"
