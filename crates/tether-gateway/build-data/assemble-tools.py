#!/usr/bin/env python3
"""Adds the servers captured by capture-tools.py (out/SERVER.json) to the labelled set's
tool lists (tests/data/tool-search/real-tools.json), each with the package it came from.
    python3 assemble-tools.py REAL_TOOLS_JSON out/ SERVER=SOURCE...
SOURCE is how the package was installed, e.g. "npm mongodb-mcp-server@3.0.4". A server's
title (serverInfo.title) and instructions from its initialize answer are kept as "about".
An entry already in the file is replaced.
"""
import json, sys, datetime
path, out, pairs = sys.argv[1], sys.argv[2], sys.argv[3:]
data = json.load(open(path))
by_name = {s["server"]: s for s in data["servers"]}
for pair in pairs:
    name, source = pair.split("=", 1)
    got = json.load(open(f"{out}/{name}.json"))
    about = " ".join(x for x in [got["serverInfo"].get("title") or "", got.get("instructions") or ""] if x)
    entry = {"server": name, "source": source,
             "captured": f"tools/list over stdio, {datetime.date.today().isoformat()}"}
    if about:
        entry["about"] = about
    entry["tools"] = [{k: t[k] for k in ("name", "title", "description", "inputSchema", "annotations") if k in t}
                      for t in got["tools"]]
    by_name[name] = entry
data["servers"] = sorted(by_name.values(), key=lambda s: s["server"])
json.dump(data, open(path, "w"), indent=1, ensure_ascii=False)
open(path, "a").write("\n")
print(len(data["servers"]), "servers,", sum(len(s["tools"]) for s in data["servers"]), "tools")
