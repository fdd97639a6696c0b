#!/usr/bin/env node
// Connection check for Codex MCP servers. `codex mcp list` only parses config
// (plus an OAuth-discovery probe for HTTP servers); it never runs an MCP
// handshake. `codex app-server` does, through its JSON-RPC method
// `mcpServerStatus/list`, with no login and no model call.
//
//   node codex-mcp-status.mjs CODEX_BIN [codex args, e.g. -c k=v ...]
// Prints one line per server: "<name>\t<ok|failed>\t<tools>\t<error>" and a
// final JSON line with the raw statuses, exits 0 when every server is ok.
// CODEX_HOME / env are taken from this process's environment.
import { spawn } from "node:child_process";
import readline from "node:readline";

const [bin, ...extra] = process.argv.slice(2);
const child = spawn(bin, ["app-server", ...extra], { stdio: ["pipe", "pipe", "pipe"] });
let stderr = "";
child.stderr.on("data", (d) => (stderr += d));
const send = (m) => child.stdin.write(JSON.stringify({ jsonrpc: "2.0", ...m }) + "\n");
const pending = new Map();
const startup = {}; // name -> {status, error}
let nextId = 1;
const call = (method, params) =>
  new Promise((resolve) => {
    const id = nextId++;
    pending.set(id, resolve);
    send({ id, method, params });
  });
readline.createInterface({ input: child.stdout }).on("line", (line) => {
  let m;
  try { m = JSON.parse(line); } catch { return; }
  if (m.id !== undefined && pending.has(m.id)) {
    pending.get(m.id)(m);
    pending.delete(m.id);
  } else if (m.method === "mcpServer/startupStatus/updated") {
    startup[m.params.name] = { status: m.params.status, error: m.params.error ?? null };
  }
});
const deadline = setTimeout(() => {
  process.stderr.write("codex-mcp-status: timeout\n" + stderr.slice(-2000));
  child.kill("SIGKILL");
  process.exit(2);
}, Number(process.env.STATUS_TIMEOUT_MS ?? 60000));

const init = await call("initialize", { clientInfo: { name: "tether-check", version: "0" } });
if (init.error) {
  process.stderr.write(JSON.stringify(init.error) + "\n" + stderr.slice(-2000));
  process.exit(2);
}
send({ method: "initialized" });
const res = await call("mcpServerStatus/list", { detail: "toolsAndAuthOnly" });
clearTimeout(deadline);
child.stdin.end();
child.kill("SIGTERM");
if (res.error) {
  process.stderr.write(JSON.stringify(res.error) + "\n" + stderr.slice(-2000));
  process.exit(2);
}
let allOk = true;
const summary = [];
for (const s of res.result.data) {
  const tools = s.tools ? Object.keys(s.tools).length : 0;
  const ok = !!s.serverInfo || tools > 0;
  allOk &&= ok;
  const err = startup[s.name]?.error ?? "";
  console.log(`${s.name}\t${ok ? "ok" : "failed"}\t${tools}\t${err.replace(/\s+/g, " ").slice(0, 200)}`);
  summary.push({ name: s.name, authStatus: s.authStatus, runtimeStatus: s.runtimeStatus ?? null,
    serverInfo: s.serverInfo ?? null, tools, startup: startup[s.name] ?? null });
}
console.log(JSON.stringify(summary));
process.exit(allOk ? 0 : 1);
