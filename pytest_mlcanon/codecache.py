"""Compiled code kept in memory by a process that forks checks (``warm``, ``grade.zygote``), so every
child reuses what the parent compiled instead of compiling it again.

Python caches bytecode in ``__pycache__`` only where it may write (not under
``PYTHONDONTWRITEBYTECODE``, nor in a read-only installation), and pytest does the same for its
assertion-rewritten test modules. A child forked from a warm process imports the canon's modules
afresh (the redirect forgets them after every run, so each check binds them to the learner's files
of the moment), so without these caches each child compiles them again.

* :func:`remember_rewrites`: pytest's rewritten modules, keyed by file, modification time and size
  (as pytest's own cache is);
* :func:`remember_compiled`: modules imported from source, keyed by file and the source's bytes, so a
  changed file (a learner's save) is never served stale code, whatever its clock says;
* :func:`precompile`: files compiled into that cache ahead of their import (never run), for modules
  the parent must not import but its children will;
* :func:`rewrite_ahead`: files rewritten into :func:`remember_rewrites`' cache ahead of their import
  (never run), for modules a child imports through pytest's rewriting hook and the parent never did
  that way (the references a check falls back on: the package that holds the plugin is marked for
  rewriting, and with ``PYTHONDONTWRITEBYTECODE`` no rewritten ``.pyc`` is kept on disk).
"""

from __future__ import annotations

import importlib.machinery
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

_REMEMBERED = "_mlcanon_remembered"


def remember_rewrites() -> None:
    """Keep each module pytest's assertion rewriter compiles (``_rewrite_test``) in memory."""
    from _pytest.assertion import rewrite

    compile_test = getattr(rewrite, "_rewrite_test", None)
    if compile_test is None or getattr(compile_test, _REMEMBERED, False):
        return
    memo: dict[tuple[str, int, int], Any] = {}

    def remembered(fn: Path, config: Any) -> Any:
        stat = os.stat(fn)
        key = (str(fn), stat.st_mtime_ns, stat.st_size)
        if key not in memo:
            memo[key] = compile_test(fn, config)
        return memo[key]

    setattr(remembered, _REMEMBERED, True)
    rewrite._rewrite_test = remembered


def remember_compiled() -> None:
    """Keep the code of each module imported from source (no usable ``.pyc``) in memory, keyed by its
    path and source bytes."""
    loader = importlib.machinery.SourceFileLoader
    source_to_code = loader.source_to_code
    if getattr(source_to_code, _REMEMBERED, False):
        return
    memo: dict[tuple[str, bytes, int], Any] = {}

    def remembered(self: Any, data: Any, path: Any, *, _optimize: int = -1) -> Any:
        if not isinstance(data, bytes) or not isinstance(path, str):
            return source_to_code(self, data, path, _optimize=_optimize)
        key = (path, data, _optimize)
        if key not in memo:
            memo[key] = source_to_code(self, data, path, _optimize=_optimize)
        return memo[key]

    setattr(remembered, _REMEMBERED, True)
    loader.source_to_code = remembered  # type: ignore[method-assign]


def precompile(paths: Iterable[str]) -> None:
    """Compile the files at ``paths`` into :func:`remember_compiled`'s cache without running them; a
    file that cannot be read or compiled is left for the child to report when it imports it."""
    remember_compiled()
    for path in paths:
        try:
            data = Path(path).read_bytes()
            importlib.machinery.SourceFileLoader("precompiled", path).source_to_code(data, path)
        except (OSError, SyntaxError, ValueError):
            continue


def rewrite_ahead(paths: Iterable[Path], config: Any) -> None:
    """Rewrite the files at ``paths`` with pytest's assertion rewriter (``config``'s settings) into
    :func:`remember_rewrites`' cache without running them; a file that cannot be read or parsed is left
    for the child to report when it imports it."""
    remember_rewrites()
    from _pytest.assertion import rewrite

    for path in paths:
        try:
            rewrite._rewrite_test(path, config)
        except (OSError, SyntaxError, ValueError):
            continue
