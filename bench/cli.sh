#!/usr/bin/env bash
# CLI benchmarks and their targets (figures go in docs/performance.md, "The tether binary"):
#   tether export over 100 local installations: <= 30 ms wall, <= 20 MB peak RSS
#   tether --version: <= 5 ms
# Needs hyperfine (Debian package `hyperfine`) and GNU time (/usr/bin/time).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --release -p tether-cli
tether=$PWD/target/release/tether
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export TETHER_HOME=$work/home NO_COLOR=1
unset TETHER_SERVER_URL TETHER_API_KEY TETHER_API_KEY_FILE

specs=()
for i in $(seq 1 100); do
  config=$(printf '{"command":"/opt/mcp/server-%d","args":["--token={{TOKEN}}","--level=info"],"env":{"API_KEY":"{{TOKEN}}","REGION":"eu-%d"}}' "$i" "$i")
  uid=$("$tether" install "server-$i" --from "$config" 2>/dev/null)
  specs+=(--mcp "$uid")
done
export BENCH_TOKEN=sk-bench
cmd=("$tether" export --format json --secret TOKEN=env:BENCH_TOKEN "${specs[@]}")
"${cmd[@]}" > "$work/out.json"
test "$(grep -c '"command"' "$work/out.json")" = 100

printf -v quoted '%q ' "${cmd[@]}"
hyperfine --shell=none --warmup 5 --runs 50 --export-json "$work/export.json" "$quoted" > /dev/null
hyperfine --shell=none --warmup 20 --runs 200 --export-json "$work/version.json" "$tether --version" > /dev/null
rss_kb=$( { /usr/bin/time -f '%M' "${cmd[@]}" > /dev/null; } 2>&1 | tail -1 )

python3 - "$work/export.json" "$work/version.json" "$rss_kb" <<'PY'
import json, statistics, sys
def stats(path):
    times = json.load(open(path))["results"][0]["times"]
    return statistics.median(times) * 1000, statistics.mean(times) * 1000
em, ea = stats(sys.argv[1]); vm, va = stats(sys.argv[2])
print(f"tether export, 100 local installations: median {em:.1f} ms (mean {ea:.1f} ms), peak RSS {int(sys.argv[3]) / 1024:.1f} MB  [targets: <= 30 ms, <= 20 MB]")
print(f"tether --version: median {vm:.2f} ms (mean {va:.2f} ms)  [target: <= 5 ms]")
PY
