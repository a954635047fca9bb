"""The integrity codes, as the grader uses them: ``INT0xx`` found by reading the files (``scan``),
``INT1xx`` while the code runs (``guard``, ``assess``). Any of them marks the item *flagged*; the
teacher's config decides whether a flagged item scores zero (the default) or keeps its points for
review. The codes are registered with every other rule in ``rubric.rules`` (their title, hint and
documentation); this module is the grader's view of them.
"""

from __future__ import annotations

from pytest_mlcanon.rubric.rules import INTEGRITY_RULES, Rule
from pytest_mlcanon.rubric.rules import integrity_finding as finding

RULES: dict[str, Rule] = {rule.code: rule for rule in INTEGRITY_RULES}

__all__ = ["RULES", "Rule", "finding"]
