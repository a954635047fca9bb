"""Renderers of the gradebook: one module per format, all reading the same ``Gradebook`` and sharing
the cells and columns of ``table``. ``write_all`` writes every output of a batch into one folder:

* ``gradebook.csv``, ``gradebook.md``, ``gradebook.json`` (the lossless model, input of ``--merge``);
* ``gradebook-lms.csv``: student, total and each item's points, for a learning-management system;
* ``feedback/<student>.md``: one page per student with every finding;
* ``gradescope/<student>/results.json``: Gradescope's autograder results format;
* ``report.html``: the sortable tables, each student linked to ``feedback/<student>.md``, and with
  matplotlib installed a per-axis histogram of the class;
* the GitHub Actions step summary, appended to ``$GITHUB_STEP_SUMMARY`` when it is set.

A student's own files are written one student at a time: if one cannot be rendered, that student's
files say so and every other student's are written.
"""

from __future__ import annotations

import json
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
    written.append(out / "gradebook-lms.csv")
    atomic_write(written[-1], csvfile.lms(book))
    for student in book.students:
        path = out / "feedback" / f"{student.student}.md"
        results = out / "gradescope" / student.student / "results.json"
        try:
            page, data = feedback.render(book, student), gradescope.render(book, student)
        except Exception as exc:  # noqa: BLE001 - one student's outputs never stop the others'
            why = f"{type(exc).__name__}: {exc}"
            page = f"# Feedback: {markdown.cell(student.student)}\n\nThis page could not be written ({markdown.cell(why)}).\n"
            data = json.dumps({"score": 0.0, "output": f"the results could not be written ({why})", "tests": []})
        atomic_write(path, page)
        atomic_write(results, data)
        written += [path, results]
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        github.append(book, Path(summary))
        written.append(Path(summary))
    return written
