"""Every benchmark with a printed target: each figure with its target and a PASS/FAIL mark (INFO for
a figure kept for the record, see ``item_vs_floor``); exit 1 when any gated figure fails.
``grade_speed.py`` (issue 8, a whole class graded twice) is long and runs on its own.
Run: ``python benchmarks/run_all.py``."""

from __future__ import annotations

import sys

import capstone_pipeline
import full_canon
import item_vs_floor
import shape_overhead

if __name__ == "__main__":
    results = [*item_vs_floor.figures(), *shape_overhead.figures(), *full_canon.figures(),
               capstone_pipeline.timing(repeats=3)]
    print()
    for figure in results:
        print(figure.line())
    sys.exit(0 if all(f.passed for f in results) else 1)
