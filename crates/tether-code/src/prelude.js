// Code mode's prelude: run once per script, before it, in a fresh QuickJS context. It gets the
// host's two functions and the offered tools' names, defines the script's only globals of
// tether's (`tools`, `console`), and returns the function the host settles tool calls with.
// Nothing here is reachable by the script except through `tools` and `console`.
(function (hostCall, hostLog, namesJson) {
  "use strict";
  const pending = new Map();
  const show = (value) => {
    if (typeof value === "string") return value;
    try {
      const text = JSON.stringify(value);
      return text === undefined ? String(value) : text;
    } catch (error) {
      return String(value);
    }
  };
  const log = (...values) => hostLog(values.map(show).join(" "));
  const console = Object.freeze({ log, info: log, warn: log, error: log, debug: log });
  const table = Object.create(null);
  for (const name of JSON.parse(namesJson)) {
    table[name] = (args) =>
      new Promise((resolve, reject) => {
        const text = args === undefined ? "{}" : JSON.stringify(args);
        pending.set(hostCall(name, text === undefined ? "null" : text), [resolve, reject]);
      });
  }
  Object.freeze(table);
  // Names a script or the engine asks of any object; a missing tool's name is an error only
  // when it is called.
  const plain = new Set(["then", "toJSON", "toString", "valueOf", "constructor", "inspect"]);
  const tools = new Proxy(table, {
    get(target, key) {
      if (typeof key !== "string" || key in target || plain.has(key)) return target[key];
      return () =>
        Promise.reject(
          new Error(`no tool named '${key}' in tools: its name is SERVER__TOOL, as tether__find_tools gives it`),
        );
    },
  });
  Object.defineProperty(globalThis, "tools", { value: tools, enumerable: true });
  Object.defineProperty(globalThis, "console", { value: console, enumerable: false });
  return function settle(id, ok, text) {
    const entry = pending.get(id);
    if (entry === undefined) return;
    pending.delete(id);
    if (ok) entry[0](text === "" ? undefined : JSON.parse(text));
    else entry[1](new Error(text));
  };
})
