#!/usr/bin/env python3
"""Fails when modules of a crate import each other in a cycle.

For every crates/*/src, each module (`a.rs`, `a/mod.rs`, `a/b.rs` → `a`, `a::b`) depends on the
modules its code names through `crate::…` paths (in `use` lines, `use crate::{…}` groups and
expressions) and `super::…` paths, each resolved to the longest known module; comments and the
`#[cfg(test)] mod tests` tail are left out, and so is a module's use of its own submodules (a
parent declares its children). A strongly connected component of more than one module is a
cycle; each is printed with its edges. Usage: module-cycles.py [REPO]
"""
import os
import re
import sys

PATH = r"[a-z_][a-z0-9_]*(?:::[a-z_][a-z0-9_]*)*"


def modules(src):
    found = {}
    for folder, _, files in os.walk(src):
        for name in files:
            if not name.endswith(".rs"):
                continue
            parts = os.path.relpath(os.path.join(folder, name), src)[:-3].split(os.sep)
            if parts[-1] == "mod":
                parts = parts[:-1]
            if parts in (["lib"], ["main"]) or parts[0] == "bin":
                continue
            found["::".join(parts)] = os.path.join(folder, name)
    return found


def dependencies(module, path, known):
    text = open(path, encoding="utf-8").read()
    cut = text.find("#[cfg(test)]\nmod tests")
    if cut >= 0:
        text = text[:cut]
    text = re.sub(r"//[^\n]*", "", text)

    def resolve(path):
        segments, best = path.split("::"), None
        for end in range(1, len(segments) + 1):
            candidate = "::".join(segments[:end])
            if candidate in known:
                best = candidate
        return best

    paths = re.findall(r"\bcrate::(" + PATH + ")", text)
    for group in re.findall(r"use crate::\{([^}]*)\}", text, re.S):
        paths += re.findall(PATH, group)
    parent = module.split("::")[:-1]
    for path in re.findall(r"\bsuper::(" + PATH + ")", text):
        paths.append("::".join(parent + [path]))
    targets = {resolve(path) for path in paths} - {None, module}
    return {t for t in targets if not t.startswith(module + "::")}


def cycles(graph):
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    total, checked = 0, 0
    for crate in sorted(os.listdir(os.path.join(root, "crates"))):
        src = os.path.join(root, "crates", crate, "src")
        if not os.path.isdir(src):
            continue
        known = modules(src)
        graph = {m: dependencies(m, p, known) & set(known) for m, p in known.items()}
        checked += len(graph)
        for component in cycles(graph):
            total += 1
            print(f"{crate}: cycle among {', '.join(component)}")
            for member in component:
                print(f"    {member} -> {', '.join(sorted(graph[member] & set(component)))}")
    if total:
        print(f"{total} import cycle(s)")
        return 1
    print(f"no import cycle among {checked} modules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
