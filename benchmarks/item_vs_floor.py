"""P1: ``pytest --canon-item=posttrain/dpo --impl=<good learner>`` wall time divided by the floor
``python -c "import torch, numpy, pytest"``, medians of 5 interleaved runs. Target <= 1.25x.
Also P4: the same run with the rubric's run-time shape checks on and off. Target <= 1.3x.
Run: ``python benchmarks/item_vs_floor.py``."""

from __future__ import annotations

import sys

from _common import PYTHON, Figure, interleaved_medians, pytest_argv

GOOD = "--impl=examples/learners/good"


def figures(repeats: int = 5) -> list[Figure]:
    item = pytest_argv("--canon-item=posttrain/dpo", GOOD)
    medians = interleaved_medians({
        "floor": [PYTHON, "-c", "import torch, numpy, pytest"],
        "item": item,
        "item, shape checks off": [*item, "-o", "mlcanon_runtime_shapes=false"],
    }, repeats)
    for name, value in medians.items():
        print(f"  {name}: {value:.2f} s")
    return [
        Figure("P1 dpo item / import floor", medians["item"] / medians["floor"], 1.25),
        Figure("P4 rubric on / off (dpo)", medians["item"] / medians["item, shape checks off"], 1.3),
    ]


if __name__ == "__main__":
    results = figures()
    for figure in results:
        print(figure.line())
    sys.exit(0 if all(f.passed for f in results) else 1)
