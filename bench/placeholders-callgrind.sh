#!/usr/bin/env bash
# Linear scaling: parse + render of one server with 10,000 vs 40,000 distinct placeholders,
# counted by valgrind (instructions, and data cache misses in its cache model) — the same
# numbers on a loaded machine as on a quiet one, unlike the wall-clock criterion bench
# (`cargo bench -p tether-config --bench render -- placeholders`). Only parse_and_render is
# counted (building the input and the secrets is left out); `mask` counts one masking of text
# holding N distinct secret values. Figures go in docs/performance.md, "Rendering and masking".
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "needs valgrind (Debian package valgrind)"; exit 1; }
cargo build --quiet --release -p tether-config --example placeholders
bin=target/release/examples/placeholders
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for shape in spread one_string mask; do
  for n in 10000 40000; do
    valgrind --tool=callgrind --cache-sim=yes --toggle-collect='*parse_and_render*' --toggle-collect='*placeholders::mask*' \
      --callgrind-out-file="$out/$shape-$n" "$bin" "$shape" "$n" >/dev/null 2>&1
    # totals: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
    read -r ir _ _ _ d1mr d1mw _ dlmr dlmw < <(grep '^totals:' "$out/$shape-$n" | cut -d' ' -f2-)
    echo "$shape $n $ir $((d1mr + d1mw)) $((dlmr + dlmw))"
  done
done | python3 -c '
import sys
rows = [l.split() for l in sys.stdin]
by = {(r[0], int(r[1])): list(map(int, r[2:])) for r in rows}
print("%-11s %6s %14s %11s %10s" % ("shape", "n", "instructions", "D1 misses", "LL misses"))
for (shape, n), v in by.items():
    print(f"{shape:<11} {n:>6} {v[0]:>14,} {v[1]:>11,} {v[2]:>10,}")
for shape in ("spread", "one_string", "mask"):
    a, b = by[(shape, 10000)], by[(shape, 40000)]
    print(f"{shape}: 40k/10k  instructions x{b[0]/a[0]:.2f}, D1 misses x{b[1]/a[1]:.2f}, LL misses x{b[2]/max(a[2],1):.2f}  [target <= x4.5]")
'
