#!/usr/bin/env python3
"""One `tools/call` (echo) straight to tether-test-mcp and through `tether serve`, side by
side, with the same Python client over stdio (newline-delimited JSON-RPC, blocking reads, no
SDK), interleaved one call at a time: p50/p99 each and what the gateway adds. Run by
bench/gateway.sh (docs/performance.md, "The gateway"). Target: p50 added <= 0.3 ms.

usage: gateway_side_by_side.py TETHER TEST_MCP [SAMPLES] [--progress]
  --progress  every call asks for progress (a progressToken in _meta), as an SDK client with a
              progress callback does
"""
import json
import os
import subprocess
import sys
import tempfile
import time

WARMUP = 200


class Client:
    """A stdio MCP client: one process, one request at a time."""

    def __init__(self, argv, env):
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
        )
        self.next_id = 0
        self.request("initialize", {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "side-by-side", "version": "1"},
        })
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message):
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        self.process.stdin.flush()

    def request(self, method, params):
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise SystemExit(f"{method}: the process closed its stdout")
            message = json.loads(line)
            if message.get("id") == self.next_id and "method" not in message:
                if "error" in message:
                    raise SystemExit(f"{method}: {message['error']}")
                return message["result"]

    def close(self):
        self.process.stdin.close()
        self.process.wait(timeout=10)


def quantile(sorted_values, q):
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    progress = "--progress" in sys.argv
    tether, server = args[0], args[1]
    samples = int(args[2]) if len(args) > 2 else 2000
    home = tempfile.mkdtemp(prefix="tether-bench-")
    env = dict(os.environ, NO_COLOR="1", TETHER_HOME=home)
    for name in ("TETHER_SERVER_URL", "TETHER_API_KEY", "TETHER_API_KEY_FILE", "RUST_LOG"):
        env.pop(name, None)
    spec = json.dumps({"test": {"command": server}})
    direct = Client([server], env)
    gateway = Client([tether, "serve", "--mcp", spec, "--audit", os.path.join(home, "audit.jsonl")], env)

    def call(client, tool, index):
        params = {"name": tool, "arguments": {"text": "x"}}
        if progress:
            params["_meta"] = {"progressToken": index}
        started = time.perf_counter_ns()
        result = client.request("tools/call", params)
        elapsed = time.perf_counter_ns() - started
        assert result["content"][0]["text"] == "x", result
        return elapsed

    straight, through = [], []
    for index in range(WARMUP + samples):
        a = call(direct, "echo", index)
        b = call(gateway, "test__echo", index)
        if index >= WARMUP:
            straight.append(a)
            through.append(b)
    direct.close()
    gateway.close()
    straight.sort()
    through.sort()
    ms = lambda ns: f"{ns / 1e6:.3f} ms"
    d50, d99 = quantile(straight, 0.5), quantile(straight, 0.99)
    g50, g99 = quantile(through, 0.5), quantile(through, 0.99)
    print(
        f"tools/call over stdio, one Python client{' asking for progress' if progress else ''}: "
        f"direct p50 {ms(d50)} p99 {ms(d99)}; through the gateway p50 {ms(g50)} p99 {ms(g99)}; "
        f"added p50 {ms(g50 - d50)} p99 {ms(g99 - d99)}  [target: p50 <= +0.3 ms]"
    )


if __name__ == "__main__":
    main()
