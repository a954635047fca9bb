"""GitHub Actions step summary: the class table, appended to ``$GITHUB_STEP_SUMMARY``."""

from __future__ import annotations

from pathlib import Path

from pytest_mlcanon.grade.gradebook import Gradebook
from pytest_mlcanon.grade.render import markdown
from pytest_mlcanon.grade.render.table import headline


def render(book: Gradebook) -> str:
    shards = f" (shard {', '.join(book.shards)})" if book.shards else ""
    return f"## mlcanon grade{shards}\n\n{headline(book)}\n\n{markdown.summary(book)}\n\n"


def append(book: Gradebook, path: Path) -> None:
    """Append (GitHub concatenates what every step writes to this file)."""
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(render(book))
