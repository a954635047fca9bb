"""``python -m pytest_mlcanon.rubric > docs/rules.md``: the rules page, generated from the registry."""

import sys

from pytest_mlcanon.rubric.rules import render_markdown

sys.stdout.write(render_markdown())
