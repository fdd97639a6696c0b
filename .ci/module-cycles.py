#!/usr/bin/env python3
"""Fails when the top-level modules of a crate import each other in a cycle.

For every crates/*/src, each top-level module (a file `x.rs` or a folder `x/`) depends on the
modules its code names as `crate::NAME` (in `use` lines, groups `use crate::{a, b}` and paths),
comments and the `#[cfg(test)] mod tests` tail excluded. A strongly connected component of
more than one module is a cycle; each is printed with its edges. Usage: module-cycles.py [REPO]
"""
import os, re, sys
root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
bad = 0
for crate in sorted(os.listdir(os.path.join(root, "crates"))):
    src = os.path.join(root, "crates", crate, "src")
    if not os.path.isdir(src):
        continue
    mods = {}
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, src)
            top = rel.split(os.sep)[0]
            top = top[:-3] if top.endswith(".rs") else top
            if top in ("lib", "main"):
                continue
            text = open(path).read()
            # drop #[cfg(test)] mod tests { ... } tail
            cut = text.find("#[cfg(test)]\nmod tests")
            if cut >= 0:
                text = text[:cut]
            # strip line comments (doc links are not imports)
            text = re.sub(r"//[^\n]*", "", text)
            refs = set(re.findall(r"\bcrate::([a-z_][a-z0-9_]*)", text))
            # use crate::{a, b::c}
            for group in re.findall(r"use crate::\{([^}]*)\}", text, re.S):
                refs |= set(re.findall(r"(?:^|,)\s*([a-z_][a-z0-9_]*)", group))
            mods.setdefault(top, set()).update(r for r in refs if r != top)
    names = set(mods)
    graph = {m: {r for r in refs if r in names} for m, refs in mods.items()}
    # Tarjan
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]
    def strong(v):
        index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
        for w in graph[v]:
            if w not in index:
                strong(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v: break
            if len(comp) > 1: out.append(sorted(comp))
    for v in sorted(graph):
        if v not in index: strong(v)
    for comp in out:
        bad += 1
        print(f"{crate}: cycle among {', '.join(comp)}")
        for m in comp:
            print(f"    {m} -> {', '.join(sorted(graph[m] & set(comp)))}")
print("no cycles" if not bad else f"{bad} cycle(s)")
sys.exit(1 if bad else 0)
