#!/usr/bin/env bash
# Re-verifies the claims in HARNESSES.md. Offline, non-interactive, every CLI in
# a fresh temp HOME, every command bounded by `timeout`, servers on 127.0.0.1.
#   specs/harnesses/check.sh [--install]     (--install: npm-install what is missing)
# Env: NPM_PREFIX (default <repo>/.cache/npm), T (per-command timeout, default 60),
#      KEEP=1 keeps the work dir, ONLY="claude codex gemini opencode" picks harnesses.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
PREFIX=${NPM_PREFIX:-$(cd "$HERE/../.." && pwd)/.cache/npm}
BIN=$PREFIX/node_modules/.bin
T=${T:-60}
ONLY=${ONLY:-claude codex gemini opencode}
PINS="@anthropic-ai/claude-code@2.1.197 @openai/codex@0.171.0 @google/gemini-cli@0.61.0 opencode-ai@1.18.33"
EV_PIN=@modelcontextprotocol/server-everything@2026.8.31
NPASS=0 NFAIL=0
pass() { echo "PASS $1"; NPASS=$((NPASS + 1)); }
fail() { echo "FAIL $1${2:+   [$2]}"; NFAIL=$((NFAIL + 1)); }
ok() { local id=$1; shift; if "$@"; then pass "$id"; else fail "$id"; fi; } # ok "ID text" cmd...
info() { echo "INFO $*"; }
want() { [[ " $ONLY " == *" $1 "* ]]; }
ms() { echo $((($(date +%s%N) - $1) / 1000000)); }

# ---------------------------------------------------------------- install / locate
# npm runs the packages' postinstall scripts (npm 11 warns about them but runs them); opencode's
# runs `opencode --version`, which creates ~/.cache|.local|.config/opencode: give it a temp HOME.
npmi() { local th; th=$(mktemp -d); HOME=$th npm install --no-audit --no-fund --userconfig "$HOME/.npmrc" \
  --cache "$(npm config get cache)" --prefix "$PREFIX" "$@" >/dev/null 2>&1; rm -rf "$th"; }
if [[ "${1:-}" == --install ]]; then
  [[ -x $BIN/claude && -x $BIN/codex && -x $BIN/gemini && -x $BIN/opencode ]] || npmi $PINS
fi
EV_JS=${EVERYTHING_JS:-}
for c in \
         "$PREFIX/node_modules/@modelcontextprotocol/server-everything/dist/index.js"; do
  [[ -z $EV_JS && -f $c ]] && EV_JS=$c
done
if [[ -z $EV_JS && "${1:-}" == --install ]]; then
  npmi "$EV_PIN"; EV_JS=$PREFIX/node_modules/@modelcontextprotocol/server-everything/dist/index.js
fi
for b in claude codex gemini opencode; do [[ -x $BIN/$b ]] || { echo "FAIL setup: $BIN/$b missing (run with --install)"; exit 1; }; done
[[ -f $EV_JS ]] || { echo "FAIL setup: server-everything not found (run with --install)"; exit 1; }

WORK=$(mktemp -d /tmp/harness-check.XXXXXX); chmod 700 "$WORK"
mkdir -p "$WORK/log" "$WORK/cwd"; touch "$WORK/marker.cjs" "$WORK/start"
REAL_HOME=$HOME
SECRET_VALUE='a"b\c {{d}} e'          # contains " \ {{ and spaces
printf '%s' "$SECRET_VALUE" > "$WORK/expected"
PROBE_JS=$HERE/probe-server.mjs
SERVER_PIDS=()
cleanup() {
  for p in "${SERVER_PIDS[@]}"; do kill -- -"$p" 2>/dev/null; done
  # anything else still running with our work dir in its command line was started by us
  for p in $(grep -l -s -F "$WORK" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3); do
    [[ $p != "$$" ]] && kill "$p" 2>/dev/null
  done
  [[ ${KEEP:-0} == 1 ]] && echo "work dir kept: $WORK" || rm -rf "$WORK"
}
trap cleanup EXIT
freeport() { node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'; }
waitport() { for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.2; done; return 1; }
start() { setsid "$@" >>"$WORK/log/servers.txt" 2>&1 & SERVER_PIDS+=($!); }

EV_PORT=$(freeport); PH_PORT=$(freeport); PB_PORT=$(freeport)
start env PORT="$EV_PORT" node --require "$HERE/listen-local.cjs" "$EV_JS" streamableHttp
start node "$PROBE_JS" http --port "$PH_PORT" --expect-file "$WORK/expected" --log "$WORK/log/http.jsonl"
start node "$PROBE_JS" http --port "$PB_PORT" --expect-file "$WORK/expected" --header authorization \
  --prefix "Bearer " --log "$WORK/log/bearer.jsonl"
waitport "$EV_PORT" && waitport "$PH_PORT" && waitport "$PB_PORT" || { echo "FAIL setup: servers did not start"; exit 1; }
ok "S1 server-everything streamableHttp listens on 127.0.0.1 only (listen-local.cjs)" \
  bash -c "ss -ltn | grep -q '127.0.0.1:$EV_PORT ' && ! ss -ltn | grep -qE '(\*|0\.0\.0\.0|\[::\]):$EV_PORT '"
EV_URL=http://127.0.0.1:$EV_PORT/mcp
PH=http://127.0.0.1:$PH_PORT
EV_CMD_JSON="\"node\",\"--require\",\"$WORK/marker.cjs\",\"$EV_JS\",\"stdio\""

# fresh temp HOME; `run H cmd...` runs cmd with HOME=H, XDG dirs and CODEX_HOME inside H,
# none of the ambient credentials/overrides, bounded by timeout, in $WORK/cwd.
newhome() { mktemp -d "$WORK/home.XXXX"; }
run() {
  local h=$1; shift
  mkdir -p "$h/tmp"
  (cd "${RUN_CWD:-$WORK/cwd}" && env -u ANTHROPIC_API_KEY -u ANTHROPIC_BASE_URL -u CLAUDE_CONFIG_DIR -u OPENAI_API_KEY \
    -u CODEX_API_KEY -u GEMINI_API_KEY -u GOOGLE_API_KEY -u GEMINI_CLI_HOME -u GEMINI_CLI_SYSTEM_SETTINGS_PATH \
    -u GEMINI_CLI_TRUST_WORKSPACE -u OPENCODE_CONFIG -u OPENCODE_CONFIG_CONTENT -u SECRET -u PROBE \
    HOME="$h" XDG_CONFIG_HOME="$h/.config" XDG_DATA_HOME="$h/.local/share" XDG_CACHE_HOME="$h/.cache" \
    XDG_STATE_HOME="$h/.local/state" CODEX_HOME="$h/.codex" TMPDIR="$h/tmp" NO_COLOR=1 \
    timeout -k 5 "$T" "$@" </dev/null)
}
# probe log helpers: plog FILE -> 0 when >=1 record and all ok; pgot FILE -> last value received
plog() { [[ -s $1 ]] && node -e 'const l=require("fs").readFileSync(process.argv[1],"utf8").trim().split("\n").map(JSON.parse);process.exit(l.length&&l.every(r=>r.ok)?0:1)' "$1"; }
pgot() { [[ -s $1 ]] && node -e 'const l=require("fs").readFileSync(process.argv[1],"utf8").trim().split("\n").map(JSON.parse);console.log(JSON.stringify(l[l.length-1].got))' "$1"; }
penv() { node -e 'const l=require("fs").readFileSync(process.argv[1],"utf8").trim().split("\n").map(JSON.parse);process.exit(l[0].envKeys.includes(process.argv[2])?0:1)' "$1" "$2"; }
hlog() { # hlog TAG -> 0 when >=1 POST to /mcp/TAG and all of them ok
  node -e 'const l=require("fs").readFileSync(process.argv[1],"utf8").trim().split("\n").map(JSON.parse).filter(r=>r.method==="POST"&&r.url===process.argv[2]);process.exit(l.length&&l.every(r=>r.ok)?0:1)' "$1" "/mcp/$2"; }
hgot() { node -e 'const l=require("fs").readFileSync(process.argv[1],"utf8").trim().split("\n").map(JSON.parse).filter(r=>r.method==="POST"&&r.url===process.argv[2]);console.log(l.length?JSON.stringify(l[l.length-1].got):"no request")' "$1" "/mcp/$2"; }
probe_stdio_args() { # JSON array items (after "node") for a stdio probe: $1 log name, [$2 expect file]
  echo "\"$PROBE_JS\",\"stdio\",\"--expect-file\",\"${2:-$WORK/expected}\",\"--log\",\"$WORK/log/$1.jsonl\""; }
has() { grep -qF -- "$2" "$1"; }
hasline() { grep -qE -- "$2" "$1"; }

# ===================================================================== Claude Code
if want claude; then
  C=$BIN/claude
  info "claude $(run "$(newhome)" "$C" --version 2>/dev/null | head -1)"
  cat >"$WORK/claude.json" <<EOF
{"mcpServers":{
 "ev-stdio":{"type":"stdio","command":"node","args":["--require","$WORK/marker.cjs","$EV_JS","stdio"]},
 "ev-http":{"type":"http","url":"$EV_URL","headers":{"X-Custom":"hello"}},
 "probe-stdio":{"command":"node","args":[$(probe_stdio_args claude-stdio)],"env":{"PROBE":"\${SECRET}"}},
 "probe-http":{"type":"http","url":"$PH/mcp/claude","headers":{"X-Probe":"\${SECRET}"}},
 "probe-args":{"command":"node","args":[$(probe_stdio_args claude-args),"--value","\${SECRET}"]},
 "probe-url":{"type":"http","url":"http://127.0.0.1:\${PH_PORT}/mcp/claude-url","headers":{"X-Probe":"\${SECRET}"}},
 "bad-stdio":{"command":"/nonexistent/bin"},
 "bad-http":{"type":"http","url":"http://127.0.0.1:1/mcp"}
}}
EOF
  h=$(newhome)
  run "$h" "$C" --mcp-config "$WORK/claude.json" --strict-mcp-config mcp list >"$WORK/c1.out" 2>&1
  ok "C1 'claude --mcp-config F --strict-mcp-config mcp list' ignores F ('No MCP servers configured')" has "$WORK/c1.out" "No MCP servers configured"

  h=$(newhome); cp "$WORK/claude.json" "$h/.claude.json"; s=$(date +%s%N)
  run "$h" env SECRET="$SECRET_VALUE" PH_PORT="$PH_PORT" "$C" mcp list >"$WORK/c2.out" 2>&1; rc=$?
  info "claude mcp list: $(ms $s) ms, exit $rc"; sed 's/^/  | /' "$WORK/c2.out"
  ok "C2 'claude mcp list' reads temp-HOME ~/.claude.json (user scope): stdio+HTTP servers '✔ Connected'" \
    bash -c "grep -E '^(ev-stdio|ev-http|probe-stdio|probe-http): .* - ✔ Connected' '$WORK/c2.out' | wc -l | grep -qx 4"
  ok "C2b failed servers show '✘ Failed to connect' and the exit code is still 0" \
    bash -c "[[ $rc == 0 ]] && grep -cE '^bad-(stdio|http): .* - ✘ Failed to connect' '$WORK/c2.out' | grep -qx 2"
  ok "C3 \${SECRET} in stdio env arrives byte-exact" plog "$WORK/log/claude-stdio.jsonl"
  ok "C3b \${SECRET} in an HTTP header arrives byte-exact" hlog "$WORK/log/http.jsonl" claude
  ok "C3c \${VAR} is also expanded in args and url" bash -c "$(declare -f plog hlog); plog '$WORK/log/claude-args.jsonl' && hlog '$WORK/log/http.jsonl' claude-url"
  ok "C4 stdio children inherit Claude's whole env (SECRET visible without being configured)" penv "$WORK/log/claude-stdio.jsonl" SECRET
  ok "C5 Claude writes the EXPANDED header secret to \$XDG_CACHE_HOME/claude-cli-nodejs/*/mcp-logs-*/ (leak)" \
    bash -c "grep -rqF '{{d}} e' '$h/.cache/claude-cli-nodejs'"
  run "$h" "$C" mcp get nope >/dev/null 2>&1; rc=$?
  ok "C6 'claude mcp get <unknown>' exits 1" test "$rc" = 1
  run "$h" "$C" mcp get probe-http >"$WORK/c6.out" 2>&1
  ok "C6b 'claude mcp get' shows headers as written (\${SECRET}, unexpanded)" has "$WORK/c6.out" 'X-Probe: ${SECRET}'

  rm -f "$WORK"/log/claude-*.jsonl; h=$(newhome); cp "$WORK/claude.json" "$h/.claude.json"
  run "$h" env PH_PORT="$PH_PORT" "$C" mcp list >"$WORK/c7.out" 2>&1
  ok "C7 unset \${SECRET} stays literal: server receives '\${SECRET}' (got $(pgot "$WORK/log/claude-stdio.jsonl"))" \
    test "$(pgot "$WORK/log/claude-stdio.jsonl")" = '"${SECRET}"'

  h=$(newhome); cfg=$(mktemp -d "$WORK/ccd.XXXX"); cp "$WORK/claude.json" "$cfg/.claude.json"; rm -f "$WORK"/log/claude-*.jsonl
  run "$h" env CLAUDE_CONFIG_DIR="$cfg" SECRET="$SECRET_VALUE" PH_PORT="$PH_PORT" "$C" mcp list >"$WORK/c8.out" 2>&1
  ok "C8 CLAUDE_CONFIG_DIR=<dir> with <dir>/.claude.json also feeds 'claude mcp list' (HOME not needed)" \
    bash -c "grep -cE '^(ev-stdio|probe-stdio|probe-http): .* - ✔ Connected' '$WORK/c8.out' | grep -qx 3"
  ok "C8b ...but mcp-logs still go to \$XDG_CACHE_HOME (i.e. ~/.cache), not CLAUDE_CONFIG_DIR" test -d "$h/.cache/claude-cli-nodejs"

  # real-run mode: exact flags tether builds; a user-scope server in HOME must be ignored
  h=$(newhome); rm -f "$WORK"/log/claude-*.jsonl
  echo '{"mcpServers":{"user-scope":{"command":"/nonexistent/user"}}}' >"$h/.claude.json"
  run "$h" env SECRET="$SECRET_VALUE" PH_PORT="$PH_PORT" ANTHROPIC_API_KEY=dummy ANTHROPIC_BASE_URL="$PH" \
    "$C" -p "hi" --mcp-config "$WORK/claude.json" --strict-mcp-config --output-format stream-json --verbose \
    >"$WORK/c9.out" 2>&1
  head -1 "$WORK/c9.out" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const j=JSON.parse(s);console.log(j.mcp_servers.map(m=>m.name+"="+m.status).join(" "))})' >"$WORK/c9.st" 2>/dev/null
  info "claude -p init mcp_servers: $(cat "$WORK/c9.st")"
  ok "C9 'claude -p --mcp-config F --strict-mcp-config --output-format stream-json --verbose': init event reports connected/failed, user scope ignored" \
    bash -c "grep -q 'ev-stdio=connected' '$WORK/c9.st' && grep -q 'probe-http=connected' '$WORK/c9.st' && grep -q 'bad-stdio=failed' '$WORK/c9.st' && ! grep -q user-scope '$WORK/c9.st'"
  ok "C9b ...and the run delivers the secret exactly (stdio env)" plog "$WORK/log/claude-stdio.jsonl"
fi

# ===================================================================== Codex
if want codex; then
  X=$BIN/codex
  info "codex $(run "$(newhome)" "$X" --version 2>/dev/null | tail -1)"
  h=$(newhome); mkdir -p "$h/.codex"
  cat >"$h/.codex/config.toml" <<EOF
[mcp_servers.ev-stdio]
command = "node"
args = ["--require", "$WORK/marker.cjs", "$EV_JS", "stdio"]
[mcp_servers.ev-http]
url = "$EV_URL"
http_headers = { "X-Custom" = "hello" }
[mcp_servers.probe-stdio]
command = "node"
args = [$(probe_stdio_args codex-stdio)]
env_vars = ["PROBE"]
[mcp_servers.probe-http]
url = "$PH/mcp/codex"
env_http_headers = { "X-Probe" = "SECRET" }
[mcp_servers.probe-bearer]
url = "http://127.0.0.1:$PB_PORT/mcp/codex-bearer"
bearer_token_env_var = "SECRET"
[mcp_servers.probe-args]
command = "node"
args = [$(probe_stdio_args codex-args), "--value", "\${SECRET}"]
[mcp_servers.probe-envref]
command = "node"
args = [$(probe_stdio_args codex-envref)]
env = { PROBE = "\${SECRET}" }
[mcp_servers.probe-hdrref]
url = "$PH/mcp/codex-hdrref"
http_headers = { "X-Probe" = "\${SECRET}" }
[mcp_servers.bad-stdio]
command = "/nonexistent/bin"
[mcp_servers.bad-http]
url = "http://127.0.0.1:1/mcp"
EOF
  s=$(date +%s%N); run "$h" "$X" mcp list --json >"$WORK/x1.json" 2>"$WORK/x1.err"; rc=$?
  info "codex mcp list --json: $(ms $s) ms, exit $rc"
  ok "X1 'codex mcp list --json' parses \$CODEX_HOME/config.toml (10 servers) without spawning any stdio server" \
    bash -c "node -e 'process.exit(JSON.parse(require(\"fs\").readFileSync(\"$WORK/x1.json\")).length===10?0:1)' && [[ ! -e '$WORK/log/codex-stdio.jsonl' ]]"
  run "$h" "$X" mcp list >"$WORK/x1.txt" 2>&1; sed -n '1,3p' "$WORK/x1.txt" | cut -c1-160 | sed 's/^/  | /'
  ok "X1b 'codex mcp list' has no connection column (Status = enabled/disabled)" \
    bash -c "grep -E '^bad-stdio ' '$WORK/x1.txt' | grep -q enabled"
  run "$h" "$X" mcp get probe-stdio >"$WORK/x2.out" 2>&1
  run "$h" "$X" mcp get probe-http --json >"$WORK/x2.json" 2>&1
  run "$h" "$X" mcp get nope >/dev/null 2>&1; rc=$?
  ok "X2 'codex mcp get' masks env (PROBE=*****), --json shows env_http_headers names only, unknown name exits 1" \
    bash -c "grep -q 'PROBE=\*\*\*\*\*' '$WORK/x2.out' && grep -q '\"X-Probe\": \"SECRET\"' '$WORK/x2.json' && [[ $rc == 1 ]]"
  s=$(date +%s%N)
  run "$h" env SECRET="$SECRET_VALUE" PROBE="$SECRET_VALUE" node "$HERE/codex-mcp-status.mjs" "$X" >"$WORK/x3.out" 2>"$WORK/x3.err"; rc=$?
  info "codex app-server mcpServerStatus/list: $(ms $s) ms, exit $rc"; grep -v '^\[' "$WORK/x3.out" | sed 's/^/  | /'
  ok "X3 app-server 'mcpServerStatus/list' (codex-mcp-status.mjs) connects: ev-stdio, ev-http ok; bad-* failed" \
    bash -c "[[ \$(awk -F'\t' '\$1==\"ev-stdio\"||\$1==\"ev-http\"{print \$2}' '$WORK/x3.out' | sort -u) == ok ]] && [[ \$(awk -F'\t' '\$1~/^bad-/{print \$2}' '$WORK/x3.out' | sort -u) == failed ]]"
  ok "X4 env_vars=[\"PROBE\"] forwards the parent's PROBE byte-exact" plog "$WORK/log/codex-stdio.jsonl"
  ok "X4b env_http_headers={\"X-Probe\"=\"SECRET\"} sends \$SECRET byte-exact" hlog "$WORK/log/http.jsonl" codex
  ok "X4c bearer_token_env_var=\"SECRET\" sends 'Bearer <secret>' byte-exact" hlog "$WORK/log/bearer.jsonl" codex-bearer
  ok "X5 no \${} interpolation in args / env / http_headers (received literally: $(pgot "$WORK/log/codex-args.jsonl"), $(pgot "$WORK/log/codex-envref.jsonl"), $(hgot "$WORK/log/http.jsonl" codex-hdrref))" \
    bash -c "[[ '$(pgot "$WORK/log/codex-args.jsonl")' == '\"\${SECRET}\"' && '$(pgot "$WORK/log/codex-envref.jsonl")' == '\"\${SECRET}\"' && '$(hgot "$WORK/log/http.jsonl" codex-hdrref)' == '\"\${SECRET}\"' ]]"
  ok "X6 stdio children get a cleared env: SECRET (not listed) absent, PROBE (env_vars) present" \
    bash -c "$(declare -f penv); ! penv '$WORK/log/codex-stdio.jsonl' SECRET && penv '$WORK/log/codex-stdio.jsonl' PROBE"

  h2=$(newhome); mkdir -p "$h2/.codex"; printf '[mcp_servers.from-file]\ncommand = "true"\n' >"$h2/.codex/config.toml"
  run "$h2" env SECRET="$SECRET_VALUE" PROBE="$SECRET_VALUE" node "$HERE/codex-mcp-status.mjs" "$X" \
    -c "mcp_servers.cli-stdio.command=\"node\"" -c "mcp_servers.cli-stdio.args=[$(probe_stdio_args codex-cli)]" \
    -c 'mcp_servers.cli-stdio.env_vars=["PROBE"]' -c "mcp_servers.cli-http.url=\"$PH/mcp/codex-cli\"" \
    -c 'mcp_servers.cli-http.env_http_headers={"X-Probe"="SECRET"}' >"$WORK/x7.out" 2>&1
  ok "X7 '-c mcp_servers.NAME.*=...' overrides add working servers and MERGE with config.toml (from-file still listed)" \
    bash -c "[[ \$(awk -F'\t' '\$1==\"cli-stdio\"||\$1==\"cli-http\"{print \$2}' '$WORK/x7.out' | sort -u) == ok ]] && grep -q '^from-file' '$WORK/x7.out'"
  run "$h2" "$X" -c 'mcp_servers.q.url="http://127.0.0.1:1/mcp"' -c 'mcp_servers.q.bearer_token="abc"' mcp list >"$WORK/x8.out" 2>&1; rc=$?
  ok "X8 an inline bearer_token is rejected (exit $rc: 'bearer_token is not supported')" \
    bash -c "[[ $rc != 0 ]] && grep -q 'bearer_token is not supported' '$WORK/x8.out'"

  rm -f "$WORK"/log/codex-stdio.jsonl
  run "$h" env SECRET="$SECRET_VALUE" PROBE="$SECRET_VALUE" CODEX_API_KEY=dummy timeout 20 "$X" exec --skip-git-repo-check \
    --json -c "openai_base_url=\"http://127.0.0.1:1/v1\"" "hi" >"$WORK/x9.out" 2>&1
  ok "X9 'codex exec' (real run) starts the config.toml servers and delivers the secret (then retries the model forever: bound it)" \
    plog "$WORK/log/codex-stdio.jsonl"
  ok "X10 CODEX_HOME=<private dir>: nothing written outside it (HOME has only .codex, besides our TMPDIR)" \
    bash -c "[[ \$(ls -A '$h' | grep -vx tmp) == .codex ]]"
fi

# ===================================================================== Gemini CLI
if want gemini; then
  G=$BIN/gemini
  info "gemini $(run "$(newhome)" "$G" --version 2>/dev/null | tail -1)"
  gen_gemini() { # $1 tag
    cat <<EOF
{"mcpServers":{
 "ev-stdio":{"command":"node","args":["--require","$WORK/marker.cjs","$EV_JS","stdio"]},
 "ev-http":{"type":"http","url":"$EV_URL","headers":{"X-Custom":"hello"}},
 "probe-stdio":{"command":"node","args":[$(probe_stdio_args gemini-$1-stdio)],"env":{"PROBE":"\${SECRET}"}},
 "probe-http":{"type":"http","url":"$PH/mcp/gemini-$1","headers":{"X-Probe":"\$SECRET"}},
 "probe-args":{"command":"node","args":[$(probe_stdio_args gemini-$1-args),"--value","\${SECRET}"]},
 "bad-stdio":{"command":"/nonexistent/bin"},
 "bad-http":{"type":"http","url":"http://127.0.0.1:1/mcp"}
},"security":{"auth":{"selectedType":"gemini-api-key"}}}
EOF
  }
  h=$(newhome); gh=$(mktemp -d "$WORK/gemini-home.XXXX"); mkdir -p "$gh/.gemini"; gen_gemini a >"$gh/.gemini/settings.json"
  s=$(date +%s%N)
  run "$h" env GEMINI_CLI_HOME="$gh" GEMINI_CLI_TRUST_WORKSPACE=true SECRET="$SECRET_VALUE" BAR_PLAIN=1 FOO_TOKEN=x \
    "$G" mcp list >"$WORK/g1.out" 2>"$WORK/g1.err"; rc=$?
  info "gemini mcp list: $(ms $s) ms, exit $rc"; sed 's/^/  | /' "$WORK/g1.err"
  ok "G1 GEMINI_CLI_HOME=<dir> (<dir>/.gemini/settings.json) + GEMINI_CLI_TRUST_WORKSPACE=true: 'gemini mcp list' shows '✓ ... - Connected'" \
    bash -c "grep -cE '^✓ (ev-stdio|ev-http|probe-stdio|probe-http|probe-args): .* - Connected' '$WORK/g1.err' | grep -qx 5"
  ok "G1b failures are '✗ ... - Disconnected'; everything is on stderr (stdout empty); exit 0" \
    bash -c "grep -cE '^✗ bad-(stdio|http): .* - Disconnected' '$WORK/g1.err' | grep -qx 2 && [[ ! -s '$WORK/g1.out' && $rc == 0 ]]"
  ok "G2 \${SECRET} in env, \$SECRET in headers, \${SECRET} in args: all byte-exact" \
    bash -c "$(declare -f plog hlog); plog '$WORK/log/gemini-a-stdio.jsonl' && hlog '$WORK/log/http.jsonl' gemini-a && plog '$WORK/log/gemini-a-args.jsonl'"
  ok "G3 stdio children: SECRET and *_TOKEN names filtered from the inherited env, other vars kept" \
    bash -c "$(declare -f penv); ! penv '$WORK/log/gemini-a-stdio.jsonl' SECRET && ! penv '$WORK/log/gemini-a-stdio.jsonl' FOO_TOKEN && penv '$WORK/log/gemini-a-stdio.jsonl' BAR_PLAIN && penv '$WORK/log/gemini-a-stdio.jsonl' PROBE"
  ok "G4 with GEMINI_CLI_HOME the real HOME gets nothing; <dir>/.gemini gets projects.json" \
    bash -c "[[ -z \$(ls -A '$h' | grep -vx tmp) && -f '$gh/.gemini/projects.json' ]]"

  gen_gemini b >"$gh/.gemini/settings.json"
  run "$h" env GEMINI_CLI_HOME="$gh" GEMINI_CLI_TRUST_WORKSPACE=true "$G" mcp list >/dev/null 2>&1
  ok "G5 unset SECRET: env value becomes '' (got $(pgot "$WORK/log/gemini-b-stdio.jsonl")), args keep '\${SECRET}' (got $(pgot "$WORK/log/gemini-b-args.jsonl"))" \
    bash -c "[[ '$(pgot "$WORK/log/gemini-b-stdio.jsonl")' == '\"\"' && '$(pgot "$WORK/log/gemini-b-args.jsonl")' == '\"\${SECRET}\"' ]]"
  run "$h" env GEMINI_CLI_HOME="$gh" "$G" mcp list >"$WORK/g6.out" 2>&1
  ok "G6 untrusted folder: every server '○ ... - Disabled' (HTTP too), nothing connected" \
    bash -c "grep -c ' - Disabled' '$WORK/g6.out' | grep -qx 7 && grep -q 'disabled because this folder is untrusted' '$WORK/g6.out'"

  mkdir -p "$WORK/gsys"; gen_gemini c >"$WORK/gsys/settings.json"; h=$(newhome)
  run "$h" env GEMINI_CLI_SYSTEM_SETTINGS_PATH="$WORK/gsys/settings.json" GEMINI_CLI_TRUST_WORKSPACE=true "$G" mcp list >"$WORK/g7.out" 2>&1
  ok "G7 GEMINI_CLI_SYSTEM_SETTINGS_PATH under /tmp is skipped ('Security Warning: Skipping system settings file ... writable by group or others')" \
    bash -c "grep -q 'Skipping system settings file' '$WORK/g7.out' && grep -q 'writable by group or others' '$WORK/g7.out' && grep -q 'No MCP servers configured' '$WORK/g7.out'"
  SYSD=$(cd "$PREFIX/.." && pwd)/gsys-check.$$
  if [[ $(id -u) == 0 ]]; then
    mkdir -p "$SYSD/root" "$SYSD/user"; chmod 755 "$SYSD" "$SYSD/root" "$SYSD/user"
    gen_gemini d >"$SYSD/root/settings.json"; gen_gemini e >"$SYSD/user/settings.json"; chown -R 65534 "$SYSD/user"
    run "$h" env GEMINI_CLI_SYSTEM_SETTINGS_PATH="$SYSD/root/settings.json" GEMINI_CLI_TRUST_WORKSPACE=true SECRET="$SECRET_VALUE" \
      "$G" mcp list >"$WORK/g8.out" 2>&1
    run "$h" env GEMINI_CLI_SYSTEM_SETTINGS_PATH="$SYSD/user/settings.json" GEMINI_CLI_TRUST_WORKSPACE=true "$G" mcp list >"$WORK/g8b.out" 2>&1
    ok "G8 system settings path is used only if the file AND every parent dir are root-owned and not g/o-writable (root-owned 0755 chain: connected)" \
      bash -c "grep -qE '^✓ probe-stdio: .* - Connected' '$WORK/g8.out'"
    ok "G8b ...a non-root-owned file is skipped ('is not owned by root'): unusable for a non-root tether" \
      bash -c "grep -q 'is not owned by root' '$WORK/g8b.out' && grep -q 'No MCP servers configured' '$WORK/g8b.out'"
    rm -rf "$SYSD"
  else
    info "G8 skipped: needs root to create a root-owned settings chain"
  fi

  h=$(newhome); gen_gemini f >"$gh/.gemini/settings.json"
  run "$h" env GEMINI_CLI_HOME="$gh" GEMINI_CLI_TRUST_WORKSPACE=true SECRET="$SECRET_VALUE" GEMINI_API_KEY=dummy \
    GOOGLE_GEMINI_BASE_URL="http://127.0.0.1:1" timeout 25 "$G" -p "hi" --output-format stream-json >"$WORK/g9.out" 2>&1
  ok "G9 'gemini -p' (real run) with GEMINI_CLI_HOME connects the servers and delivers the secret" \
    bash -c "$(declare -f plog hlog); plog '$WORK/log/gemini-f-stdio.jsonl' && hlog '$WORK/log/http.jsonl' gemini-f"

  # workspace settings (<cwd>/.gemini/settings.json) merge in; --allowed-mcp-server-names filters
  mkdir -p "$WORK/gws/.gemini"; gen_gemini g >"$gh/.gemini/settings.json"
  echo "{\"mcpServers\":{\"ws-probe\":{\"command\":\"node\",\"args\":[$(probe_stdio_args gemini-ws)],\"env\":{\"PROBE\":\"\${SECRET}\"}}}}" >"$WORK/gws/.gemini/settings.json"
  gemrun() { local trust=$1; shift; RUN_CWD=$WORK/gws run "$(newhome)" env $trust GEMINI_CLI_HOME="$gh" SECRET="$SECRET_VALUE" GEMINI_API_KEY=dummy \
    GOOGLE_GEMINI_BASE_URL="$PH" "$G" -p "hi" --output-format json "$@" >"$WORK/g10.out" 2>&1; }
  gemrun GEMINI_CLI_TRUST_WORKSPACE=true; a=$(test -s "$WORK/log/gemini-ws.jsonl" && echo y); rm -f "$WORK/log/gemini-ws.jsonl"
  gemrun GEMINI_CLI_TRUST_WORKSPACE=true --allowed-mcp-server-names probe-stdio probe-http; b=$(test -s "$WORK/log/gemini-ws.jsonl" && echo y)
  ok "G10 a project's .gemini/settings.json servers are added to ours; '--allowed-mcp-server-names A B' keeps only A, B" \
    bash -c "[[ '$a' == y && -z '$b' ]] && $(declare -f plog); plog '$WORK/log/gemini-g-stdio.jsonl'"
  gemrun GEMINI_CLI_TRUST_WORKSPACE=false; rc=$?
  ok "G11 'gemini -p' in an untrusted folder refuses to run (exit $rc, 'not running in a trusted directory')" \
    bash -c "[[ $rc == 55 ]] && grep -q 'not running in a trusted directory' '$WORK/g10.out'"
fi

# ===================================================================== opencode
if want opencode; then
  O=$BIN/opencode
  info "opencode $(run "$(newhome)" "$O" --version 2>/dev/null | tail -1)"
  strip() { sed 's/\x1b\[[0-9;]*m//g' "$1"; }
  gen_oc() { # $1 tag, $2 value expression
    cat <<EOF
{"mcp":{
 "ev-stdio":{"type":"local","command":[$EV_CMD_JSON]},
 "ev-http":{"type":"remote","url":"$EV_URL","headers":{"X-Custom":"hello"}},
 "probe-stdio":{"type":"local","command":["node",$(probe_stdio_args oc-$1-stdio)],"environment":{"PROBE":"$2"}},
 "probe-http":{"type":"remote","url":"$PH/mcp/oc-$1","headers":{"X-Probe":"$2"}},
 "bad-stdio":{"type":"local","command":["/nonexistent/bin"]},
 "bad-http":{"type":"remote","url":"http://127.0.0.1:1/mcp"}
}}
EOF
  }
  gen_oc file "{file:$WORK/expected}" >"$WORK/oc-file.json"
  h=$(newhome); s=$(date +%s%N)
  run "$h" env OPENCODE_CONFIG="$WORK/oc-file.json" SECRET="$SECRET_VALUE" "$O" mcp list >"$WORK/o1.out" 2>"$WORK/o1.err"; rc=$?
  info "opencode mcp list: $(ms $s) ms, exit $rc"; strip "$WORK/o1.out" | sed 's/^/  | /'
  ok "O1 OPENCODE_CONFIG=<file>: 'opencode mcp list' shows '✓ NAME connected' for stdio+HTTP" \
    bash -c "$(declare -f strip); strip '$WORK/o1.out' | grep -cE '✓ (ev-stdio|ev-http|probe-stdio|probe-http) connected' | grep -qx 4"
  ok "O1b failures: '✗ NAME failed' + error line; exit code 0 anyway" \
    bash -c "$(declare -f strip); strip '$WORK/o1.out' | grep -cE '✗ bad-(stdio|http) failed' | grep -qx 2 && [[ $rc == 0 ]]"
  ok "O2 {file:PATH} inserts the file JSON-escaped: secret byte-exact in environment and headers" \
    bash -c "$(declare -f plog hlog); plog '$WORK/log/oc-file-stdio.jsonl' && hlog '$WORK/log/http.jsonl' oc-file"
  ok "O3 stdio children inherit opencode's whole env (SECRET visible)" penv "$WORK/log/oc-file-stdio.jsonl" SECRET
  ok "O4 startup writes \$XDG_CONFIG_HOME/opencode/.gitignore, a DB under \$XDG_DATA_HOME/opencode, npm cache in ~/.npm" \
    bash -c "[[ -f '$h/.config/opencode/.gitignore' && -f '$h/.local/share/opencode/opencode.db' && -d '$h/.npm' ]]"

  gen_oc env "{env:SECRET}" >"$WORK/oc-env.json"; h=$(newhome)
  run "$h" env OPENCODE_CONFIG="$WORK/oc-env.json" SECRET="$SECRET_VALUE" "$O" mcp list >"$WORK/o5.out" 2>&1; rc=$?
  ok "O5 {env:SECRET} is raw text substitution: a secret with \" or \\ breaks the file (exit $rc, 'not valid JSON')" \
    bash -c "[[ $rc != 0 ]] && grep -q 'is not valid JSON' '$WORK/o5.out'"
  ok "O5b ...and the parse error prints the substituted secret to the terminal" has "$WORK/o5.out" "$SECRET_VALUE"
  printf 'plain-secret-123' >"$WORK/expected-plain"; h=$(newhome)
  cat >"$WORK/oc-plain.json" <<EOF
{"mcp":{"probe-stdio":{"type":"local","command":["node",$(probe_stdio_args oc-plain-stdio "$WORK/expected-plain")],"environment":{"PROBE":"{env:PLAIN}"}}}}
EOF
  run "$h" env OPENCODE_CONFIG="$WORK/oc-plain.json" PLAIN=plain-secret-123 "$O" mcp list >/dev/null 2>&1
  ok "O6 {env:VAR} works for values without \" or \\" plog "$WORK/log/oc-plain-stdio.jsonl"

  CONTENT=$(SECRET_VALUE="$SECRET_VALUE" node -e '
    const [js, exp, log, url] = process.argv.slice(1), s = process.env.SECRET_VALUE;
    console.log(JSON.stringify({mcp: {
      "probe-stdio": {type: "local", command: ["node", js, "stdio", "--expect-file", exp, "--log", log], environment: {PROBE: s}},
      "probe-http": {type: "remote", url, headers: {"X-Probe": s}}}}))' \
    "$PROBE_JS" "$WORK/expected" "$WORK/log/oc-content-stdio.jsonl" "$PH/mcp/oc-content")
  h=$(newhome); run "$h" env OPENCODE_CONFIG_CONTENT="$CONTENT" "$O" mcp list >/dev/null 2>&1
  ok "O7 OPENCODE_CONFIG_CONTENT with the secret inlined (JSON-escaped): byte-exact" \
    bash -c "$(declare -f plog hlog); plog '$WORK/log/oc-content-stdio.jsonl' && hlog '$WORK/log/http.jsonl' oc-content"
  printf 'x-zz-y' >"$WORK/expected-inject"; h=$(newhome)
  run "$h" env INJ=zz OPENCODE_CONFIG_CONTENT="{\"mcp\":{\"probe-stdio\":{\"type\":\"local\",\"command\":[\"node\",$(probe_stdio_args oc-inject-stdio "$WORK/expected-inject")],\"environment\":{\"PROBE\":\"x-{env:INJ}-y\"}}}}" \
    "$O" mcp list >/dev/null 2>&1
  ok "O8 OPENCODE_CONFIG_CONTENT is substituted too: a literal value containing {env:X} is expanded (got $(pgot "$WORK/log/oc-inject-stdio.jsonl"))" \
    plog "$WORK/log/oc-inject-stdio.jsonl"

  h=$(newhome); mkdir -p "$h/.config/opencode" "$WORK/proj"
  echo '{"mcp":{"from-user":{"type":"remote","url":"http://127.0.0.1:1/u"},"dup":{"type":"remote","url":"http://127.0.0.1:1/user"}}}' >"$h/.config/opencode/opencode.json"
  echo '{"mcp":{"from-project":{"type":"remote","url":"http://127.0.0.1:1/p"},"dup":{"type":"remote","url":"http://127.0.0.1:1/project"}}}' >"$WORK/proj/opencode.json"
  echo '{"mcp":{"from-env":{"type":"remote","url":"http://127.0.0.1:1/e"},"dup":{"type":"remote","url":"http://127.0.0.1:1/envfile"}}}' >"$WORK/oc-prec.json"
  dup() { node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const m=JSON.parse(s).mcp;console.log(Object.keys(m).sort().join(",")+" dup="+m.dup.url.split("/").pop())})'; }
  p1=$( (cd "$WORK/proj" && env HOME="$h" XDG_CONFIG_HOME="$h/.config" XDG_DATA_HOME="$h/.local/share" XDG_CACHE_HOME="$h/.cache" XDG_STATE_HOME="$h/.local/state" OPENCODE_CONFIG="$WORK/oc-prec.json" timeout "$T" "$O" debug config 2>/dev/null </dev/null) | dup)
  p2=$( (cd "$WORK/proj" && env HOME="$h" XDG_CONFIG_HOME="$h/.config" XDG_DATA_HOME="$h/.local/share" XDG_CACHE_HOME="$h/.cache" XDG_STATE_HOME="$h/.local/state" OPENCODE_CONFIG="$WORK/oc-prec.json" OPENCODE_CONFIG_CONTENT='{"mcp":{"dup":{"type":"remote","url":"http://127.0.0.1:1/content"}}}' timeout "$T" "$O" debug config 2>/dev/null </dev/null) | dup)
  info "opencode precedence: OPENCODE_CONFIG -> [$p1]; +CONTENT -> [$p2]"
  ok "O9 servers merge from user global + OPENCODE_CONFIG + project opencode.json; project beats OPENCODE_CONFIG on a name clash" \
    test "$p1" = "dup,from-env,from-project,from-user dup=project"
  ok "O9b OPENCODE_CONFIG_CONTENT beats the project file" test "$p2" = "dup,from-env,from-project,from-user dup=content"

  h=$(newhome); gen_oc run "{file:$WORK/expected}" >"$WORK/oc-run.json"
  run "$h" env OPENCODE_CONFIG="$WORK/oc-run.json" timeout 25 "$O" run "hi" >"$WORK/o10.out" 2>&1
  ok "O10 'opencode run' (real run) starts the OPENCODE_CONFIG servers with the secret (then waits on the offline model: bound it)" \
    bash -c "$(declare -f plog hlog); plog '$WORK/log/oc-run-stdio.jsonl' && hlog '$WORK/log/http.jsonl' oc-run"
fi

# ===================================================================== general
sleep 1
left=$(for p in $(grep -l -s -F "$WORK" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3); do
  { tr '\0' ' ' <"/proc/$p/cmdline"; } 2>/dev/null | grep -qE 'probe-server.mjs (stdio)|marker.cjs' && echo "$p"; done)
ok "Z1 no stdio MCP server left running after the harness commands exited (found: ${left:-none})" test -z "$left"
touched=$(cd "$REAL_HOME" && find .claude.json .claude .codex .gemini .config/opencode .local/share/opencode \
  .local/state/opencode .cache/claude-cli-nodejs .cache/opencode -newer "$WORK/start" -not -path '.claude/projects*' 2>/dev/null | head -5)
ok "Z2 the real HOME's harness config/state paths were not touched (found: ${touched:-none})" test -z "$touched"
echo "$NPASS passed, $NFAIL failed"
[[ $NFAIL == 0 ]]
