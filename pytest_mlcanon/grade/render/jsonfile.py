"""JSON renderer: the whole gradebook, losslessly (``mlcanon grade --merge`` reads it back)."""

from __future__ import annotations

import json

from pytest_mlcanon.grade.gradebook import Gradebook


def render(book: Gradebook) -> str:
    return json.dumps(book.to_dict(), indent=2, default=str) + "\n"
