#!/usr/bin/env python3
"""Holds ARCHITECTURE.md's countable "never"s to lists kept beside this script, and no `.rs` file
under crates/ or tests/ to more than 1,200 lines (MAX_LINES: split a longer one into modules), and
no `.rs` line naming a tracker issue ("issue 37"): code says what it does, not where it was asked.

Three lists, one line per file: `PATH COUNT REASON` (a `#` starts a comment line).
- `unsafe-blocks.txt`: every `unsafe {` block in the workspace's Rust code (tests included), each
  file's count with why the blocks are needed.
- `spawn-sites.txt`: every place shipped code starts a process (`Command::new`, `exec()`,
  `fork()`), with whether it runs under `tether __supervise` or why not.
- `listeners.txt`: every listener shipped code binds (`TcpListener::bind`, `UnixListener::bind`,
  `TcpListener::from_std`), with `admission: FILE` (the file that admits its requests by
  `tether_http::Admission`, which must say `Admission::for_address`) or why it needs none.

Shipped code is `crates/*/src` of every crate but the test crates (`tether-testkit`,
`tether-test-*`), without a file's `#[cfg(test)] mod tests` tail nor the file such a tail names
(`src/**/tests.rs`, `src/**/tests/*.rs`). Comments are left out. The
check fails when a file's count differs from its line, or a file with sites has no line, or a
line names a file with none: a new site is a decision written down, never an accident.
Usage: counted-claims.py [REPO]
"""
import os
import re
import sys

MAX_LINES = 1200
# An issue tracker's numbers mean nothing to a reader of the code (and go stale).
ISSUE_NUMBER = re.compile(r"\b[Ii]ssue #?[0-9]+")
TEST_CRATES = re.compile(r"^crates/tether-test(kit|-[a-z-]+)/")
CHECKS = {
    "unsafe-blocks.txt": (re.compile(r"\bunsafe\s*\{"), False),
    "spawn-sites.txt": (re.compile(r"\bCommand::new\(|\.exec\(\)|\bfork\(\)"), True),
    "listeners.txt": (
        re.compile(r"\b(?:TcpListener|UnixListener)::(?:bind|from_std)\("),
        True,
    ),
}


def rust_files(repo):
    for top in ("crates", "tests"):
        for folder, dirs, files in os.walk(os.path.join(repo, top)):
            dirs[:] = [d for d in dirs if d != "target"]
            for name in files:
                if name.endswith(".rs"):
                    path = os.path.join(folder, name)
                    yield os.path.relpath(path, repo).replace(os.sep, "/")


def code(repo, path, shipped):
    text = open(os.path.join(repo, path), encoding="utf-8").read()
    if shipped:
        cut = text.find("#[cfg(test)]\nmod tests")
        if cut >= 0:
            text = text[:cut]
    return re.sub(r"//[^\n]*", "", text)


def shipped(path):
    return (
        re.match(r"^crates/[^/]+/src/", path)
        and not TEST_CRATES.match(path)
        and not re.search(r"/tests(?:\.rs$|/)", path[len("crates/"):])
    )


def listed(repo, name):
    entries = {}
    for number, line in enumerate(open(os.path.join(repo, ".ci", name), encoding="utf-8"), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 2)
        if len(parts) < 3 or not parts[1].isdigit():
            sys.exit(f".ci/{name}:{number}: want `PATH COUNT REASON`, got {line!r}")
        entries[parts[0]] = (int(parts[1]), parts[2], number)
    return entries


def main():
    repo = sys.argv[1] if len(sys.argv) > 1 else "."
    files = sorted(rust_files(repo))
    failures, totals = [], {}
    longest = 0
    for path in files:
        lines = len(open(os.path.join(repo, path), encoding="utf-8").read().splitlines())
        longest = max(longest, lines)
        if lines > MAX_LINES:
            failures.append(f"{path}: {lines} lines, over {MAX_LINES:,} (split it into modules)")
        text = open(os.path.join(repo, path), encoding="utf-8").read()
        for number, line in enumerate(text.splitlines(), 1):
            if ISSUE_NUMBER.search(line):
                failures.append(f"{path}:{number}: names a tracker issue; say what the code does instead")
    for name, (pattern, shipped_only) in CHECKS.items():
        found = {}
        for path in files:
            if shipped_only and not shipped(path):
                continue
            count = len(pattern.findall(code(repo, path, shipped_only)))
            if count:
                found[path] = count
        entries = listed(repo, name)
        for path, count in found.items():
            if path not in entries:
                failures.append(f"{path}: {count} new site(s) of .ci/{name}, not listed (add a line with the reason)")
            elif entries[path][0] != count:
                failures.append(f"{path}: {count} site(s) of .ci/{name}, the list says {entries[path][0]} (line {entries[path][2]})")
        for path, (count, reason, number) in entries.items():
            if path not in found:
                failures.append(f".ci/{name}:{number}: {path} has no site any more (remove the line)")
            admission = re.match(r"admission: (\S+)", reason)
            if admission:
                target = os.path.join(repo, admission.group(1))
                if not os.path.exists(target) or "Admission::for_address" not in open(target, encoding="utf-8").read():
                    failures.append(f".ci/{name}:{number}: {admission.group(1)} does not admit by Admission::for_address")
        totals[name] = sum(found.values())
    for failure in failures:
        print(failure)
    summary = ", ".join(f"{n[:-4]}: {c}" for n, c in totals.items())
    summary += f", longest .rs file: {longest} lines"
    if failures:
        sys.exit(f"counted claims: {len(failures)} failure(s) ({summary})")
    print(f"counted claims hold ({summary})")


main()
