"""Renderers of the gradebook: one module per format, all reading the same ``Gradebook`` and sharing
the cells and columns of ``table``. ``write_all`` writes every output of a batch into one folder:

* ``gradebook.csv``, ``gradebook.md``, ``gradebook.json`` (the lossless model, input of ``--merge``);
* ``feedback/<student>.md``: one page per student with every finding;
* ``gradescope/<student>/results.json``: Gradescope's autograder results format;
* ``report.html``: the tables and, with matplotlib installed, a per-axis histogram of the class;
* the GitHub Actions step summary, appended to ``$GITHUB_STEP_SUMMARY`` when it is set.
"""

from __future__ import annotations

import os
from pathlib import Path

from pytest_mlcanon.grade.gradebook import Gradebook
from pytest_mlcanon.grade.render import csvfile, feedback, github, gradescope, html, jsonfile, markdown
from pytest_mlcanon.reports.model import atomic_write


def write_all(book: Gradebook, out: Path) -> list[Path]:
    """Write every output into ``out``; returns the files written."""
    written = [out / "gradebook.csv", out / "gradebook.md", out / "gradebook.json", out / "report.html"]
    atomic_write(written[0], csvfile.render(book))
    atomic_write(written[1], markdown.render(book))
    atomic_write(written[2], jsonfile.render(book))
    atomic_write(written[3], html.render(book))
    for student in book.students:
        path = out / "feedback" / f"{student.student}.md"
        atomic_write(path, feedback.render(book, student))
        results = out / "gradescope" / student.student / "results.json"
        atomic_write(results, gradescope.render(book, student))
        written += [path, results]
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        github.append(book, Path(summary))
        written.append(Path(summary))
    return written
