"""What a student may read: a text with the grader's paths and the host's details taken out.

Student-visible text (Gradescope's ``output`` fields, the feedback pages) quotes test messages,
tracebacks and the guard's refusals, which name files as the grader saw them. ``student_text``
rewrites them:

* our packages' files, installed (``.../site-packages/canon_tests/test_x.py``) or in a checkout, as
  ``canon_tests/test_x.py`` (also ``canon_refs/``, ``pytest_mlcanon/``);
* the learner's files, as a job or the snapshot held them (``/tmp/mlcanon-grade-x/job-0009/eli/
  transformer/attention.py``, or the gradebook's ``eli/transformer/attention.py``), relative to their
  submission: ``transformer/attention.py``;
* other installed packages' files relative to their ``site-packages`` (``torch/nn/functional.py``),
  the standard library's relative to it, the interpreter's prefix dropped;
* the grader's home folder as ``~``, the host name as ``<host>``, user ids as ``uid``.

It works on the text alone (a gradebook merged from shards graded elsewhere holds their paths), so it
matches every form of these paths, not only this machine's.
"""

from __future__ import annotations

import functools
import re
import socket
import sys
import sysconfig
from pathlib import Path

from pytest_mlcanon import catalog

#: Our top-level packages: a path through one of them is shown from the package on.
PACKAGES = ("canon_tests", "canon_refs", "pytest_mlcanon")
#: The characters a path in a message runs over (a quote, a bracket or a space ends it).
_RUN = r"[^\s'\"()<>\[\],;]*"
_START = r"(?<![\w.~-])"
_BATCH = re.compile(_START + r"/(?:" + _RUN + r"/)?mlcanon-grade-[^/\s'\"]+/(?:(?:job-\d+|snapshots|probe|private)/)?")
_OURS = re.compile(_START + r"/(?:" + _RUN + r"/)?(?=(?:" + "|".join(PACKAGES) + r")/)")
_PACKAGES = re.compile(_START + r"/(?:" + _RUN + r"/)?(?:(?:site|dist)-packages|lib(?:64)?/python\d[\d.]*)/")
_UID = re.compile(r"\b(uid|gid)[ =:]*\d+")


def batch_relative(text: str) -> str:
    """``text`` with the batch's scratch folders taken off its paths (``/tmp/mlcanon-grade-x/job-0009/
    eli/a.py`` is ``eli/a.py``): the gradebook's messages read the same in every run of a batch."""
    return _BATCH.sub("", text)


@functools.cache
def _prefixes() -> tuple[str, ...]:
    """This host's folders that only say where things are installed, longest first."""
    found = {sysconfig.get_paths().get(key, "") for key in ("stdlib", "platstdlib")}
    found |= {sys.prefix, sys.base_prefix, sys.exec_prefix}
    found |= {str(Path(__file__).resolve().parents[2])}  # the checkout or site-packages holding us
    return tuple(sorted((p.rstrip("/") for p in found if len(p.rstrip("/")) > 1), key=len, reverse=True))


@functools.cache
def _host() -> re.Pattern[str] | None:
    name = socket.gethostname()
    names = {name, name.split(".")[0]} - {"", "localhost"}
    names = {n for n in names if len(n) >= 3}
    return re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(names, key=len, reverse=True))) + r")\b") if names else None


@functools.cache
def _areas() -> frozenset[str]:
    return frozenset(module.split("/", 1)[0] for item in catalog.all_items() for module in item.modules)


def student_text(text: str, student: str = "") -> str:
    """``text`` with no grader path or host detail; ``student``'s own files relative to their submission."""
    value = _BATCH.sub("", text)
    value = _OURS.sub("", value)
    value = _PACKAGES.sub("", value)
    for prefix in _prefixes():
        value = re.sub(_START + re.escape(prefix) + r"/", "", value)
        value = re.sub(_START + re.escape(prefix) + r"(?![\w.-])", "", value)
    home = str(Path.home())
    if len(home) > 1:
        value = re.sub(_START + re.escape(home) + r"(?=/|\b)", "~", value)
    host = _host()
    if host is not None:
        value = host.sub("<host>", value)
    value = _UID.sub(r"\1", value)
    if student and student not in _areas():
        value = re.sub(_START + re.escape(student) + r"/(?=\S)", "", value)
    return value
