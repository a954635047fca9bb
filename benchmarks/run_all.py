"""Every benchmark, each figure with its target and a PASS/FAIL mark; exit 1 when any fails.
Run: ``python benchmarks/run_all.py``."""

from __future__ import annotations

import sys

import full_canon
import item_vs_floor
import shape_overhead

if __name__ == "__main__":
    results = [*item_vs_floor.figures(), *shape_overhead.figures(), *full_canon.figures()]
    print()
    for figure in results:
        print(figure.line())
    sys.exit(0 if all(f.passed for f in results) else 1)
