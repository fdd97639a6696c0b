#!/usr/bin/env bash
# The official MCP conformance suite's server scenarios, in two parts. Needs npm (Node 22 comes
# from the npm registry as `node@22`).
# 1. Suite 0.1.16 against server-everything directly and through `tether serve --listen` in
#    front of it; fails when a scenario that passes directly fails through the gateway.
# 2. Suite 0.2.0-alpha.12's requirement sets (`--requirements 2025-11-25` and `2026-07-28`)
#    against `tether-test-mcp --conformance` (which speaks 2025-11-25 only) directly and
#    through `tether serve --listen --bare-names` in front of it; fails on any failure not
#    listed, with its reason, in specs/gateway/conformance/*.yml. The test server directly at
#    2026-07-28 is measured, not judged: it does not speak that revision by design.
#    Then the Tasks extension's scenarios (SEP-2663) and json-schema-2020-12, each alone,
#    through the same gateway: every one must pass.
#   specs/gateway/conformance.sh            # prints the summaries, comparison and pass counts
# TETHER_BIN=PATH and TEST_MCP_BIN=PATH use those binaries instead of building them (.ci/run
# passes the ones its tests built, so nothing is built twice).
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

# --- Part 2: the 0.2.0-alpha.12 requirement sets, the conformance-mode test server.
prefix=$PWD/.cache/conformance-0.2
for attempt in 1 2 3; do
  test -x "$prefix/node_modules/.bin/conformance" && break
  npm install --no-audit --no-fund --loglevel=error --prefix "$prefix" \
    node@22.23.3 @modelcontextprotocol/conformance@0.2.0-alpha.12 >&2 || sleep $(( attempt * 10 ))
done
test -x "$prefix/node_modules/.bin/conformance" || { echo "npm could not install the conformance suite 0.2.0-alpha.12" >&2; exit 1; }
conformance2() { "$prefix/node_modules/.bin/node" "$prefix/node_modules/.bin/conformance" "$@"; }
test_mcp=${TEST_MCP_BIN:-}
if test -z "$test_mcp"; then
  cargo build --quiet -p tether-test-mcp
  test_mcp=target/debug/tether-test-mcp
fi
"$test_mcp" --conformance --http 127.0.0.1:0 > "$work/test-mcp.out" 2> "$work/test-mcp.err" & pids+=($!)
for _ in $(seq 1 100); do test -s "$work/test-mcp.out" && break; sleep 0.1; done
direct=$(sed -n 's/^listening on //p' "$work/test-mcp.out")
test -n "$direct" || { echo "tether-test-mcp --conformance did not start:" >&2; cat "$work/test-mcp.err" >&2; exit 1; }
TETHER_HOME=$work/home2 "$tether" serve --no-pins --bare-names --wait-for-servers \
  --mcp "{\"conf\":{\"url\":\"$direct\"}}" \
  --listen 127.0.0.1:0 --no-auth > "$work/gateway2.out" 2> "$work/gateway2.err" & pids+=($!)
for _ in $(seq 1 100); do test -s "$work/gateway2.out" && break; sleep 0.1; done
gateway=$(sed -n 's/^listening on //p' "$work/gateway2.out")
test -n "$gateway" || { echo "tether serve did not start:" >&2; cat "$work/gateway2.err" >&2; exit 1; }
baselines=specs/gateway/conformance
failed=()
# run NAME URL REVISION [BASELINE]: the requirement set; with a baseline (or none needed),
# judged: a failure not in it, or an entry in it that passes, fails this script.
run() {
  local name=$1 url=$2 revision=$3 baseline=${4:-} args=()
  test -n "$baseline" && args=(--expected-failures "$baseline")
  echo "== $name ($revision requirement set)"
  if conformance2 server --url "$url" --requirements "$revision" "${args[@]}" \
      -o "$work/$name-$revision" > "$work/$name-$revision.log" 2>&1; then
    status=ok
  else
    status=failed
  fi
  sed -n '/=== SUMMARY ===/,$p' "$work/$name-$revision.log" | grep -vE '^\s*$'
  # A run that checked nothing must not pass by having nothing to fail.
  grep -qE '^Total: [1-9][0-9]* passed' "$work/$name-$revision.log" \
    || { echo "the suite passed no check against $name: it did not run" >&2; status=failed; }
  test "$status" = ok || failed+=("$name at $revision")
}
run test-server-directly "$direct" 2025-11-25
run through-tether-serve "$gateway" 2025-11-25
run through-tether-serve "$gateway" 2026-07-28 "$baselines/gateway-2026-07-28.yml"
# Measured only: the test server speaks 2025-11-25, so most of this set fails by design.
echo "== test-server-directly (2026-07-28 requirement set; measured, not judged)"
conformance2 server --url "$direct" --requirements 2026-07-28 -o "$work/direct-2026" 2>&1 \
  | grep -E '^Total:' || true
# Scenarios the requirement set reports without scoring, each run alone through the gateway in
# front of the same test server and each required to pass: the Tasks extension's (SEP-2663;
# the test server's task fixtures are its tasks.rs) and json-schema-2020-12 (a 2020-12 input
# schema kept whole). tasks-status-notifications is left out: the suite skips it itself (its
# harness awaits a rewrite for subscriptions/listen).
for scenario in json-schema-2020-12 tasks-lifecycle tasks-capability-negotiation tasks-wire-fields \
    tasks-request-state-removal tasks-mrtr-input tasks-request-headers \
    tasks-dispatch-and-envelope tasks-required-task-error tasks-mrtr-composition; do
  log=$work/$scenario.log
  conformance2 server --url "$gateway" --scenario "$scenario" 2>&1 \
    | sed 's/\x1b\[[0-9;]*m//g' > "$log" || true
  if grep -qE '^Passed: [1-9][0-9]*/[0-9]+, 0 failed' "$log"; then
    echo "pass  $scenario through tether serve: $(grep -E '^Passed:' "$log")"
  else
    echo "FAIL  $scenario through tether serve"
    grep -E 'FAILURE|Error|Passed:' "$log" | head -n 20
    failed+=("$scenario alone")
  fi
done
if test "${#failed[@]}" -gt 0; then
  printf '== unexpected failures (not in the baseline) or stale baseline entries: %s\n' "${failed[@]}"
  exit 1
fi
echo "== every required scenario passes, or fails only as its baseline says"
