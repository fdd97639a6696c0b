#!/usr/bin/env bash
# The sandbox's cost (figures go in docs/sandbox.md, "What it costs"): start-up (`tether test`:
# start, initialize, tools/list, shut down) and start-up plus one tools/call (`tether call`),
# each under --sandbox none and --sandbox default, paired: every round runs both, in a random
# order, so the machine's load hits both alike; the figure is the median of the per-round ratios.
# Target: a sandboxed start costs at most 10% more than an unsandboxed one. A third arm,
# "default-nocg" (default's rules with "tether": {"processes": 0}), shows what the pids cgroup
# itself costs (on cgroup v1, moving a process into it waits for an RCU grace period; under
# default the supervisor moves the server after the spawn, off the start-up path). A fourth arm,
# "strict", has the server join its cgroup before exec (race-free, on the start-up path). A fifth,
# "hosts", is default's ports with a host allow-list: the server in its own network namespace
# behind the supervisor's egress proxy (specs/sandbox/TECH.md §7).
# Servers: the workspace's test server, and server-everything from .cache/npm (if installed).
# PROFILE=debug uses target/debug (no release build; the ratio is what matters). ROUNDS=N.
# SRT=PATH adds an arm with the server under @anthropic-ai/sandbox-runtime's `srt` (bubblewrap;
# it needs bwrap, rg and socat: Debian's bubblewrap, ripgrep, socat) and tether's --sandbox none,
# with no network and ~/.ssh, ~/.aws unreadable.
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
echo '{"network": {"outbound": {"allow_host": [".example.com"], "allow_port": [53, 80, 443]}}}' > "$work/hosts.json"
echo '{"network": {"allowedDomains": [], "deniedDomains": []}, "filesystem": {"denyRead": ["~/.ssh", "~/.aws"], "allowRead": [], "allowWrite": [], "denyWrite": []}}' > "$work/srt.json"
python3 - "$bin" "$everything" "${ROUNDS:-30}" "$work/nocg.json" "${SRT:-}" "$work/srt.json" "$work/hosts.json" <<'PY'
import json, os, random, statistics, subprocess, sys, time
bin, everything, rounds, nocg, srt, srt_settings, hosts = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7]
arms = {"none": "none", "default": "default", "default-nocg": nocg, "strict": "strict", "hosts": hosts}
if srt:
    arms["srt"] = "none"
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
def argv(what, arm, entry, tool, args):
    if arm == "srt":
        entry = {"command": srt, "args": ["--settings", srt_settings, entry["command"]] + entry.get("args", [])}
    spec = json.dumps({"mcpServers": {"s": entry}})
    base = [tether, "test", "--mcp", spec] if what == "test" else [tether, "call", "--mcp", spec, "s", tool, "--args", args]
    return base + ["--sandbox", arms[arm]]
for name, (entry, tool, args) in servers.items():
    for label, what in [("start-up (tether test)", "test"), ("start-up + 1 tools/call (tether call)", "call")]:
        for arm in arms:  # warm-up
            once(argv(what, arm, entry, tool, args))
        times = {arm: [] for arm in arms}
        for _ in range(rounds):
            order = list(arms)
            random.shuffle(order)
            for arm in order:
                times[arm].append(once(argv(what, arm, entry, tool, args)))
        medians = ", ".join(f"{arm} {statistics.median(t):.1f} ms" for arm, t in times.items())
        ratios = []
        for arm in [a for a in arms if a != "none"]:
            r = statistics.median(d / n for n, d in zip(times["none"], times[arm]))
            ratios.append(f"{arm}/none {r:.3f} ({(r - 1) * 100:+.1f}%)")
        print(f"{name}, {label}: {medians} (medians of {rounds}); paired: {', '.join(ratios)}  [target: <= +10%]")
PY
