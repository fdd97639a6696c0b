#!/usr/bin/env python3
"""One `tools/call` (echo) straight to tether-test-mcp and through `tether serve`, side by
side, with the same Python client over stdio (newline-delimited JSON-RPC, blocking reads, no
SDK), interleaved one call at a time: p50/p99 each and what the gateway adds. Run by
bench/gateway.sh (docs/performance.md, "The gateway"). Target: p50 added <= 0.3 ms.

usage: gateway_side_by_side.py TETHER TEST_MCP [SAMPLES] [--progress] [--http]
  --progress  every call asks for progress (a progressToken in _meta), as an SDK client with a
              progress callback does
  --http      Streamable HTTP instead of stdio: the test server on `--http 127.0.0.1:0`, and
              `tether serve --listen 127.0.0.1:0 --no-auth` in front of it (the server reached
              over HTTP too); one keep-alive connection per side, a 2025-11-25 session each,
              JSON or event-stream answers read whole
"""
import http.client
import json
import os
import subprocess
import urllib.parse
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


class HttpClient:
    """A Streamable HTTP MCP client: one keep-alive connection, one request at a time."""

    def __init__(self, url):
        parsed = urllib.parse.urlparse(url)
        self.path = parsed.path
        self.connection = http.client.HTTPConnection(parsed.hostname, parsed.port)
        self.session = None
        self.next_id = 0
        self.request("initialize", {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "side-by-side", "version": "1"},
        })
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def post(self, message):
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "Mcp-Protocol-Version": "2025-11-25",
        }
        if self.session:
            headers["Mcp-Session-Id"] = self.session
        self.connection.request("POST", self.path, json.dumps(message), headers)
        response = self.connection.getresponse()
        body = response.read().decode()
        self.session = response.getheader("Mcp-Session-Id") or self.session
        return body

    def request(self, method, params):
        self.next_id += 1
        body = self.post({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        if body.lstrip().startswith("{"):
            messages = [json.loads(body)]
        else:
            messages = [json.loads(line[5:]) for line in body.splitlines() if line.startswith("data:") and line[5:].strip()]
        for message in messages:
            if message.get("id") == self.next_id and "method" not in message:
                if "error" in message:
                    raise SystemExit(f"{method}: {message['error']}")
                return message["result"]
        raise SystemExit(f"{method}: no answer in {body!r}")

    def close(self):
        self.connection.close()


def listening(process):
    """The URL a process prints as its first line, `listening on URL`."""
    line = process.stdout.readline().decode().strip()
    if not line.startswith("listening on "):
        raise SystemExit(f"expected 'listening on URL', got {line!r}")
    return line[len("listening on "):]


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
    over_http = "--http" in sys.argv
    processes = []
    if over_http:
        upstream = subprocess.Popen([server, "--http", "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        processes.append(upstream)
        url = listening(upstream)
        spec = json.dumps({"test": {"url": url}})
        served = subprocess.Popen(
            [tether, "serve", "--mcp", spec, "--audit", os.path.join(home, "audit.jsonl"),
             "--listen", "127.0.0.1:0", "--no-auth", "--wait-for-servers"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        processes.append(served)
        direct = HttpClient(url)
        gateway = HttpClient(listening(served))
    else:
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
    for process in processes:
        process.terminate()
        process.wait(timeout=10)
    straight.sort()
    through.sort()
    ms = lambda ns: f"{ns / 1e6:.3f} ms"
    d50, d99 = quantile(straight, 0.5), quantile(straight, 0.99)
    g50, g99 = quantile(through, 0.5), quantile(through, 0.99)
    print(
        f"tools/call over {'Streamable HTTP' if over_http else 'stdio'}, one Python client{' asking for progress' if progress else ''}: "
        f"direct p50 {ms(d50)} p99 {ms(d99)}; through the gateway p50 {ms(g50)} p99 {ms(g99)}; "
        f"added p50 {ms(g50 - d50)} p99 {ms(g99 - d99)}  [target: p50 <= +0.3 ms]"
    )


if __name__ == "__main__":
    main()
