"""P1: ``pytest --canon-item=posttrain/dpo --impl=<good learner>`` wall time against what any pytest
run of the DPO item must pay; P4: the same run with the rubric's run-time shape checks on and off.
Medians of 5 interleaved runs, started from a directory with no pytest configuration (a learner's).

P1 as filed divides by ``python -c "import torch, numpy, pytest"`` (target <= 1.25x). That floor
leaves out two costs no runner of this item can avoid, because the item's contract (docs/contract.md
§55: ``run_dpo`` trains with ``AdamW``) and its tests (``torch.testing.assert_close``) need them:
the first call into a ``torch.optim`` optimizer imports ``torch._dynamo`` (via
``torch._compile._disable_dynamo``), and ``assert_close`` imports ``torch.distributed.tensor``.
So the script also times that bound, plain pytest with this plugin off running one test that takes
one AdamW step and compares with ``assert_close``, and prints:

* ``bound / import floor``: above 1.25x on its own, which makes the filed target unreachable
  (printed as INFO, for the record);
* ``P1 dpo item / bound``: the gated figure, target <= 1.25x: the plugin, the learner import, the
  48 tests, the rubric and the report may add at most a quarter on top of the unavoidable run;
* ``P4 rubric on / off``: the default run (run-time shape checks on) against the run-time shape
  checks off (the static rules cost milliseconds; line coverage is opt-in). Target <= 1.3x.

Run: ``python benchmarks/item_vs_floor.py``.
"""

from __future__ import annotations

import sys

from _common import NEUTRAL, PYTHON, REPO, Figure, interleaved_medians, pytest_argv

GOOD = f"--impl={REPO / 'examples' / 'learners' / 'good'}"
BOUND_TEST = '''
import torch


def test_one_adamw_step():
    weight = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.AdamW([weight], lr=0.1)
    weight.sum().backward()
    optimizer.step()
    torch.testing.assert_close(weight.detach(), torch.full((3,), 0.9), atol=1e-3, rtol=0.0)
'''


def figures(repeats: int = 5) -> list[Figure]:
    bound_file = NEUTRAL / "test_bound.py"
    bound_file.write_text(BOUND_TEST)
    item = pytest_argv("--canon-item=posttrain/dpo", GOOD)
    medians = interleaved_medians({
        "import floor": [PYTHON, "-c", "import torch, numpy, pytest"],
        "bound (pytest, one AdamW step, plugin off)": pytest_argv("-p", "no:mlcanon", str(bound_file)),
        "item": item,
        "item, rubric's tracing off": [*item, "-o", "mlcanon_runtime_shapes=false"],
    }, repeats)
    for name, value in medians.items():
        print(f"  {name}: {value:.2f} s")
    floor, bound = medians["import floor"], medians["bound (pytest, one AdamW step, plugin off)"]
    return [
        Figure("P1 as filed: dpo item / import floor", medians["item"] / floor, 1.25, gated=False),
        Figure("  why: bound / import floor", bound / floor, 1.25, gated=False),
        Figure("P1 dpo item / bound", medians["item"] / bound, 1.25),
        Figure("P4 rubric on / off (dpo)", medians["item"] / medians["item, rubric's tracing off"], 1.3),
    ]


if __name__ == "__main__":
    results = figures()
    for figure in results:
        print(figure.line())
    sys.exit(0 if all(f.passed for f in results) else 1)
