"""The performance budget of the plugin and the canon (P1, P4, the shape-check overhead, P2): each
figure with its target and a PASS/FAIL mark (INFO for a figure kept for the record, see
``item_vs_floor``); exit 1 when any gated figure fails.

Three scripts run separately, because they measure one workload at length:
``capstone_pipeline.py`` (the capstone's pipeline: the seed's 20 s limit, our 10 s target),
``capstone_table.py`` (the seed's capstone figures beside ours over five seeds) and
``grade_speed.py`` (``mlcanon grade`` on a class of 40). Run: ``python benchmarks/run_all.py``."""

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
