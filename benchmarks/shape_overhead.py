"""Overhead of the run-time shape checks (issue: rubric v2): an item's test run with them on,
divided by the same run with them off, on the attention, k-means and GPT references.
Target <= 1.3x each. Run: ``python benchmarks/shape_overhead.py``."""

from __future__ import annotations

import sys

from _common import REPO, Figure, interleaved_medians, pytest_argv

ITEMS = ("transformer/attention", "classical/kmeans", "transformer/gpt")
TARGET = 1.3


def figures(repeats: int = 5) -> list[Figure]:
    out = []
    for item in ITEMS:
        base = pytest_argv(f"--canon-item={item}", f"--impl={REPO / 'canon_refs'}")
        medians = interleaved_medians({"on": base, "off": [*base, "-o", "mlcanon_runtime_shapes=false"]}, repeats)
        print(f"  {item}: on {medians['on']:.2f} s, off {medians['off']:.2f} s")
        out.append(Figure(f"shape-check overhead, {item}", medians["on"] / medians["off"], TARGET))
    return out


if __name__ == "__main__":
    results = figures()
    for figure in results:
        print(figure.line())
    sys.exit(0 if all(f.passed for f in results) else 1)
