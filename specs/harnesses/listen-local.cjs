// Preload (node --require) that makes a server which calls listen(port) with no
// host bind 127.0.0.1 instead of every interface. server-everything's
// streamableHttp transport does `app.listen(PORT)`, i.e. 0.0.0.0/::.
const net = require("node:net");
const orig = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === "number" || typeof args[0] === "string") {
    if (args.length === 1 || typeof args[1] === "function") args.splice(1, 0, "127.0.0.1");
  } else if (args[0] && typeof args[0] === "object" && args[0].host === undefined && args[0].path === undefined) {
    args[0] = { ...args[0], host: "127.0.0.1" };
  }
  return orig.apply(this, args);
};
