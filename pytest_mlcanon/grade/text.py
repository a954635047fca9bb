"""Text that came from a submission, made safe to keep and to show.

Anything a submission controls (a folder or file name, a test message, a docstring quoted in a
finding, a frame the child sent) can carry bytes that are not UTF-8, terminal escape sequences,
bidirectional overrides that reorder what a reader sees, or a megabyte of text. ``clean`` is applied
once, when the parent builds a gradebook cell; each renderer then escapes for its own format
(``render.markdown.escape``, ``html.escape``, ``render.csvfile``'s formula guard).
"""

from __future__ import annotations

import hashlib
import os
import re
import unicodedata

#: C0 and C1 control characters (tab and newline are handled apart), zero-width and
#: direction-changing marks (the "Trojan source" characters), the byte-order mark and the
#: interlinear annotation marks: none belongs in a one-line verdict or a file name.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff\ufff9-\ufffb]")
_SPACE = re.compile(r"[\t\n\r]+")
#: File-system names no student id may take: Windows' reserved device names (with any extension).
_RESERVED = frozenset({"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))})
ID_MAX = 60


def clean(text: object, limit: int = 2000, lines: bool = False) -> str:
    """``text`` as printable Unicode: surrogates (undecodable bytes) shown as ``\\xNN``, control and
    direction characters removed, tabs and (unless ``lines``) newlines turned into spaces, and at most
    ``limit`` characters (an ellipsis marks a cut)."""
    value = str(text)
    if any("\ud800" <= ch <= "\udfff" for ch in value):
        value = value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    if lines:
        value = "\n".join(_SPACE.sub(" ", line) for line in value.splitlines())
    else:
        value = _SPACE.sub(" ", value)
    value = _CONTROL.sub("", value)
    return value if len(value) <= limit else value[:max(0, limit - 1)] + "\u2026"


def readable(name: str | bytes) -> str:
    """A file name as a person can read it: UTF-8 when it is, else each byte as Windows-1252 (the usual
    encoding of a name that is not UTF-8), else Latin-1; control characters removed."""
    raw = name if isinstance(name, bytes) else os.fsencode(name)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        try:
            text = raw.decode("cp1252")
        except UnicodeDecodeError:
            text = raw.decode("latin-1")
    return clean(text, limit=1000)


def student_id(name: str | bytes) -> str:
    """A student id made from a folder name, safe as a file name on every common file system: letters
    and digits of any script (NFC), ``.``, ``_`` and ``-``, at most ``ID_MAX`` characters (a cut name
    keeps a hash of the whole, so two long names stay apart), never a reserved device name."""
    text = unicodedata.normalize("NFC", readable(name))
    safe = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in text)
    safe = re.sub(r"_{2,}", "_", safe).strip("._-") or "student"
    if len(safe) > ID_MAX:
        digest = hashlib.sha1(text.encode("utf-8")).hexdigest()[:6]
        safe = f"{safe[:ID_MAX - 7].rstrip('._-')}-{digest}"
    if safe.split(".", 1)[0].lower() in _RESERVED:
        safe = f"{safe}_"
    return safe


def unique(name: str, taken: set[str]) -> str:
    """``name``, or ``name-2``, ``name-3``... so that no two ids are equal ignoring case (``Ann`` and
    ``ann`` are one folder on macOS and Windows); records the choice in ``taken`` (casefolded)."""
    candidate, n = name, 2
    while candidate.casefold() in taken:
        candidate, n = f"{name}-{n}", n + 1
    taken.add(candidate.casefold())
    return candidate


def number(value: float) -> str:
    """Points to two decimals without trailing zeros: 7.5, 10, 0.33."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return text if text not in ("-0", "") else "0"
