"""What the page tests need from a real browser: Debian's headless ``chromium`` (skipped where it is
not installed), and the start tags of a page, read from its source or from the DOM the browser built."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
#: Marks a test that runs the browser.
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium)")


def chromium(url: str, *args: str, profile: Path) -> subprocess.CompletedProcess[str]:
    """Run headless chromium on ``url`` with ``args`` (``--dump-dom``, ``--screenshot=PATH``...) in a
    throw-away profile, with nothing fetched in the background."""
    return subprocess.run([CHROMIUM or "chromium", "--headless", "--no-sandbox", "--disable-gpu",
                           "--disable-background-networking", "--disable-component-update", "--no-first-run",
                           f"--user-data-dir={profile}", *args, url],
                          capture_output=True, text=True, timeout=180)


class Elements(HTMLParser):
    """Every start tag with its attributes, in document order."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    def having(self, tag: str, **wanted: str) -> list[dict[str, str]]:
        """The attributes of each ``tag`` whose attributes hold every wanted word (``class_="x"``: class,
        ``data_item="3"``: data-item)."""
        return [attrs for name, attrs in self.tags if name == tag
                and all(wanted[k] in attrs.get(k.rstrip("_").replace("_", "-"), "").split() for k in wanted)]


def elements(html: str) -> Elements:
    parser = Elements()
    parser.feed(html)
    return parser
