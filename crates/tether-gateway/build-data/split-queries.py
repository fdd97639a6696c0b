#!/usr/bin/env python3
"""Writes the labelled requests (tests/data/tool-search/queries.json) from the requests as
written (a `kind | request | SERVER__TOOL,...` line each) and the set committed before:
    python3 split-queries.py tests/data/tool-search/queries.json tests/data/tool-search/requests.txt
Each request gets its kind and its split, decided by a rule fixed before any tuning: held out
when the first byte of the SHA-256 of its text is divisible by 3 (about a third). The 143
requests of the first set keep kind "original"; those of its former tuning half stay in the
tune split whatever their hash (they were looked at while tuning the related-term tables).
The quality test checks every request's split against this rule.
"""
import hashlib, json, sys

def held_out(text):
    return hashlib.sha256(text.encode()).digest()[0] % 3 == 0

path, new = sys.argv[1], sys.argv[2]
data = json.load(open(path))
out = []
for q in data["queries"]:
    kind = q.get("kind", "original")
    if kind != "original":
        continue
    former = q.get("former_half", q.get("half"))
    split = "held-out" if held_out(q["query"]) and former == "held-out" else "tune"
    out.append({"query": q["query"], "expect": q["expect"], "kind": "original",
                "former_half": former, "split": split})
seen = {q["query"] for q in out}
for line in open(new):
    if line.startswith("#") or not line.strip():
        continue
    kind, text, expect = [x.strip() for x in line.split("|")]
    assert text not in seen, text
    seen.add(text)
    out.append({"query": text, "expect": expect.split(","), "kind": kind,
                "split": "held-out" if held_out(text) else "tune"})
data["note"] = ("Requests labelled with the SERVER__TOOL(s) that answer them, each with its kind and split "
                "(build-data/split-queries.py; specs/tool-search/TECH.md §5). The held-out split was not "
                "looked at while tuning.")
data["queries"] = out
json.dump(data, open(path, "w"), indent=1, ensure_ascii=False)
open(path, "a").write("\n")
from collections import Counter
print(Counter((q["kind"], q["split"]) for q in out))
