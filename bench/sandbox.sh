#!/usr/bin/env bash
# The sandbox's cost (figures go in docs/sandbox.md, "What it costs"): start-up (`tether test`:
# start, initialize, tools/list, shut down) and start-up plus one tools/call (`tether call`),
# each under --sandbox none and --sandbox default, paired: every round runs both, in a random
# order, so the machine's load hits both alike; the figure is the median of the per-round ratios.
# Target: a sandboxed start costs at most 10% more than an unsandboxed one. A third arm,
# "default-nocg" (default's rules with "tether": {"processes": 0}), shows what the pids cgroup
# itself costs (on cgroup v1, moving a process into it waits for an RCU grace period).
# Servers: the workspace's test server, and server-everything from .cache/npm (if installed).
# PROFILE=debug uses target/debug (no release build; the ratio is what matters). ROUNDS=N.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${PROFILE:-release}
if [ "$profile" = release ]; then
  cargo build --quiet --release -p tether-cli -p tether-test-mcp
else
  cargo build --quiet -p tether-cli -p tether-test-mcp
fi
bin=$PWD/target/$profile
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export TETHER_HOME=$work/home NO_COLOR=1
unset TETHER_SERVER_URL TETHER_API_KEY TETHER_API_KEY_FILE

everything=$PWD/.cache/npm/node_modules/.bin/mcp-server-everything
echo '{"network": {"outbound": {"allow_port": [53, 80, 443]}}, "tether": {"processes": 0}}' > "$work/nocg.json"
python3 - "$bin" "$everything" "${ROUNDS:-30}" "$work/nocg.json" <<'PY'
import json, os, random, statistics, subprocess, sys, time
bin, everything, rounds, nocg = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
arms = {"none": "none", "default": "default", "default-nocg": nocg}
tether = os.path.join(bin, "tether")
servers = {"test server": ({"command": os.path.join(bin, "tether-test-mcp")}, "echo", '{"text":"hi"}')}
if os.path.exists(everything):
    servers["server-everything"] = ({"command": everything, "args": ["stdio"]}, "echo", '{"message":"hi"}')
def once(argv):
    start = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(argv)}")
    return elapsed * 1000
for name, (entry, tool, args) in servers.items():
    spec = json.dumps({"mcpServers": {"s": entry}})
    for label, base in [("start-up (tether test)", [tether, "test", "--mcp", spec]),
                        ("start-up + 1 tools/call (tether call)", [tether, "call", "--mcp", spec, "s", tool, "--args", args])]:
        for mode in arms.values():  # warm-up
            once(base + ["--sandbox", mode])
        times = {arm: [] for arm in arms}
        for _ in range(rounds):
            order = list(arms)
            random.shuffle(order)
            for arm in order:
                times[arm].append(once(base + ["--sandbox", arms[arm]]))
        medians = ", ".join(f"{arm} {statistics.median(t):.1f} ms" for arm, t in times.items())
        ratios = []
        for arm in ("default", "default-nocg"):
            r = statistics.median(d / n for n, d in zip(times["none"], times[arm]))
            ratios.append(f"{arm}/none {r:.3f} ({(r - 1) * 100:+.1f}%)")
        print(f"{name}, {label}: {medians} (medians of {rounds}); paired: {', '.join(ratios)}  [target: <= +10%]")
PY
