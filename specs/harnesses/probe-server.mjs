#!/usr/bin/env node
// Tiny MCP server (no dependencies) used by check.sh to see whether a harness
// delivered a secret byte-for-byte.
//
//   node probe-server.mjs stdio --expect-file F [--log L] [--env NAME | --value V]
//       stdio transport (newline-delimited JSON-RPC). Compares env var NAME
//       (default PROBE), or the argument V, with the contents of F. On mismatch it exits with
//       status 3 before answering `initialize`, so `<harness> mcp list`
//       reports the server as failed; on match it serves normally.
//   node probe-server.mjs http --port P --expect-file F [--log L]
//       [--header NAME] [--prefix STR]
//       Streamable HTTP on 127.0.0.1:P/mcp (JSON responses, no SSE). A POST
//       whose header NAME (default x-probe) is not exactly PREFIX+contents(F)
//       gets 403, so the harness reports the server as failed.
// Both expose one tool, `probe`, returning "match" or "mismatch".
// L (a JSON-lines file) records what was received: TEST USE ONLY, it holds the
// secret.
import fs from "node:fs";
import http from "node:http";
import readline from "node:readline";

const argv = process.argv.slice(2);
const mode = argv[0];
const opt = (name, dflt) => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : dflt;
};
const expected = fs.readFileSync(opt("--expect-file"), "utf8");
const logFile = opt("--log");
const log = (rec) => {
  if (logFile) fs.appendFileSync(logFile, JSON.stringify({ pid: process.pid, ...rec }) + "\n");
};

function handle(msg, ok) {
  if (msg.id === undefined || msg.id === null) return null; // notification
  const reply = (result) => ({ jsonrpc: "2.0", id: msg.id, result });
  switch (msg.method) {
    case "initialize":
      return reply({
        protocolVersion: msg.params?.protocolVersion ?? "2025-06-18",
        capabilities: { tools: {} },
        serverInfo: { name: "tether-probe", version: "1.0.0" },
      });
    case "ping":
      return reply({});
    case "tools/list":
      return reply({
        tools: [{
          name: "probe",
          description: "Says whether the probed secret arrived exactly.",
          inputSchema: { type: "object", properties: {} },
        }],
      });
    case "tools/call":
      return reply({ content: [{ type: "text", text: ok ? "match" : "mismatch" }] });
    case "resources/list":
      return reply({ resources: [] });
    case "resources/templates/list":
      return reply({ resourceTemplates: [] });
    case "prompts/list":
      return reply({ prompts: [] });
    default:
      return { jsonrpc: "2.0", id: msg.id, error: { code: -32601, message: "method not found" } };
  }
}

if (mode === "stdio") {
  const argIdx = argv.indexOf("--value");
  const name = argIdx >= 0 ? "argv --value" : opt("--env", "PROBE");
  const got = argIdx >= 0 ? argv[argIdx + 1] : process.env[name];
  const ok = got === expected;
  log({ transport: "stdio", env: name, ok, got: got ?? null, envKeys: Object.keys(process.env).sort() });
  const rl = readline.createInterface({ input: process.stdin });
  rl.on("line", (line) => {
    if (!line.trim()) return;
    let msg;
    try { msg = JSON.parse(line); } catch { return; }
    if (msg.method === "initialize" && !ok) {
      process.stderr.write(`probe: ${name} mismatch\n`);
      process.exit(3);
    }
    const out = handle(msg, ok);
    if (out) process.stdout.write(JSON.stringify(out) + "\n");
  });
  rl.on("close", () => process.exit(0));
} else if (mode === "http") {
  const port = Number(opt("--port"));
  const header = opt("--header", "x-probe").toLowerCase();
  const want = opt("--prefix", "") + expected;
  const server = http.createServer((req, res) => {
    const got = req.headers[header];
    const ok = got === want;
    log({ transport: "http", method: req.method, url: req.url, header, ok, got: got ?? null });
    if (req.method !== "POST" || !req.url.startsWith("/mcp")) {
      res.writeHead(req.method === "GET" ? 405 : 404).end();
      return;
    }
    if (!ok) {
      res.writeHead(403, { "content-type": "text/plain" }).end("probe header mismatch\n");
      return;
    }
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      let msg;
      try { msg = JSON.parse(body); } catch {
        res.writeHead(400).end();
        return;
      }
      const msgs = Array.isArray(msg) ? msg : [msg];
      const outs = msgs.map((m) => handle(m, ok)).filter(Boolean);
      if (!outs.length) {
        res.writeHead(202).end();
        return;
      }
      res.writeHead(200, { "content-type": "application/json" })
        .end(JSON.stringify(Array.isArray(msg) ? outs : outs[0]));
    });
  });
  server.listen(port, "127.0.0.1", () => process.stderr.write(`probe http on 127.0.0.1:${port}\n`));
  for (const s of ["SIGTERM", "SIGINT"]) process.on(s, () => process.exit(0));
} else {
  process.stderr.write("usage: probe-server.mjs stdio|http ...\n");
  process.exit(2);
}
