"""``%load_ext pytest_mlcanon`` and ``%%canon ITEM``: a small notebook executed in a real kernel (nbclient),
its reports read from the cells' outputs; the cell that crashes, exits or hangs ends only its check,
and the kernel's own state is untouched."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from pytest_mlcanon import notebook

nbformat = pytest.importorskip("nbformat", reason="needs the notebook test tools (the test extra)")
nbclient = pytest.importorskip("nbclient", reason="needs the notebook test tools (the test extra)")
pytest.importorskip("ipykernel", reason="needs ipykernel (the notebook extra)")

pytestmark = pytest.mark.slow  # starts a kernel and a warm server (CONTRIBUTING.md's fast lane leaves it out)

REPO = Path(__file__).resolve().parents[1]
GOOD_BOXES = (REPO / "examples" / "learners" / "good" / "detection" / "boxes.py").read_text()
HANGS = GOOD_BOXES + "\n\ndef box_area(boxes):\n    while True:\n        pass\n"
CRASHES = GOOD_BOXES + "\nimport os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n"
EXITS = GOOD_BOXES + "\n\ndef box_area(boxes):\n    import os\n    os._exit(0)\n"


def _run(root: Path, cells: list[str], allow_errors: bool = False) -> list[dict[str, object]]:
    """Execute the cells in a fresh python3 kernel whose working directory is ``root``; each cell's outputs."""
    book = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in cells])
    nbclient.NotebookClient(book, timeout=600, kernel_name="python3", allow_errors=allow_errors,
                            resources={"metadata": {"path": str(root)}}).execute()
    return [cell["outputs"] for cell in book.cells]


def _shown(outputs: object) -> tuple[str, str, str]:
    """(the HTML, the plain text, stderr) a cell showed."""
    html = text = err = ""
    for output in outputs:  # type: ignore[attr-defined]
        data = output.get("data", {})
        html += data.get("text/html", "")
        text += data.get("text/plain", "")
        if output.get("name") == "stderr":
            err += output.get("text", "")
        if output.get("output_type") == "error":
            err += f"{output.get('ename')}: {output.get('evalue')}"
    return html, text, err


def test_a_cell_is_checked_in_a_warm_fork_and_the_kernel_survives_what_it_does(tmp_path: Path) -> None:
    outputs = _run(tmp_path, [
        "%load_ext pytest_mlcanon\nkept = 41",
        f"%%canon detection/boxes\n{GOOD_BOXES}",
        f"%%canon detection/boxes --timeout 4\n{HANGS}",
        f"%%canon detection/boxes\n{CRASHES}",
        f"%%canon detection/boxes\n{EXITS}",
        "import sys\n(kept + 1, 'torch' in sys.modules, 'canon_refs' in sys.modules, 'pytest' in sys.modules)",
        "%%canon nope/nothing\nx = 1",
    ], allow_errors=True)
    html, text, _ = _shown(outputs[1])
    assert "#18 detection/boxes: strong 5/5 · " in html and "data-item='detection/boxes'" in html
    assert "drilled from this cell, attempt 1" in html  # never drilled: the cell started its clock
    assert "── #18 detection/boxes: strong 5/5 · " in text and "23 passed" in text  # a terminal's view
    hung, crashed, exited = (_shown(outputs[n])[0] for n in (2, 3, 4))
    assert "#18 detection/boxes: timed out: still running after 4 s" in hung and "Nothing recorded" in hung
    assert "crashed: the process was killed by SIGSEGV" in crashed and "Nothing recorded" in crashed
    assert "exited: the process exited (status 0)" in exited and "\x1b[" not in exited  # no terminal colours
    assert _shown(outputs[5])[1] == "(42, False, False, False)"  # the kernel's state, and nothing heavy in it
    # bad input: one line, and the cell fails (so "Run all" stops there)
    assert _shown(outputs[6])[2].startswith("UsageError: %%canon: unknown canon item 'nope/nothing'")
    assert (tmp_path / "practice" / "detection" / "boxes.py").read_text().rstrip() == EXITS.rstrip()  # the last cell
    progress = json.loads((tmp_path / ".mlcanon" / "progress.json").read_text())
    (attempt,) = progress["items"]["detection/boxes"]["attempts"]
    assert attempt["checks"] == 1 and attempt["passed"] is True  # the partial checks recorded nothing


def test_the_magic_line_is_checked_before_anything_runs() -> None:
    assert notebook.parse("posttrain/dpo").module == "posttrain/dpo"
    assert notebook.parse("18 --timeout 2.5").timeout_s == 2.5
    multi = notebook.parse("systems/ddp --module tensor_parallel_toy")
    assert multi.module == "systems/tensor_parallel_toy"
    for bad in ("", "posttrain/dpo --timeout 0", "systems/ddp --module nope", "classical", "nope/nothing",
                "posttrain/dpo --bogus"):
        with pytest.raises(notebook.CanonError):
            notebook.parse(bad)
    for asked in ("--help", "-h", "posttrain/dpo --help"):  # the help, shown rather than failed
        with pytest.raises(notebook.Help, match=r"(?s)usage: %%canon .*ITEM.*--module M.*--practice DIR.*--timeout S"):
            notebook.parse(asked)


def test_no_server_is_left_behind(tmp_path: Path) -> None:
    server = notebook.Server(tmp_path)
    assert server.alive
    server.close()
    assert not server.alive
    with pytest.raises(ProcessLookupError):
        os.kill(server.process.pid, 0)


def test_an_interrupted_cell_stops_its_check_and_the_next_cell_gets_a_new_server(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import time

    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "hanging-check.pid"
    hangs = GOOD_BOXES + (f"\n\ndef box_area(boxes):\n    import os\n    open({str(marker)!r}, 'w').write(str(os.getpid()))"
                          "\n    while True:\n        pass\n")
    threading.Thread(target=lambda: (_wait_for(marker), os.kill(os.getpid(), signal.SIGINT)), daemon=True).start()
    with pytest.raises(notebook.Interrupted):
        notebook.run_cell("detection/boxes --timeout 120", hangs, tmp_path)
    pid = int(marker.read_text())
    deadline = time.monotonic() + 10
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(pid)  # the hanging check ended with the server, not at its 120 s timeout
    assert notebook.run_cell("detection/boxes", GOOD_BOXES, tmp_path).reply.run.passed
    notebook._close_all()


def _wait_for(path: Path) -> None:
    import time

    while not path.exists():
        time.sleep(0.05)
    time.sleep(0.2)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"


def test_a_cell_keeps_a_copy_of_work_it_did_not_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_mlcanon import cli, drill

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(notebook, "_written_by_cells", {})
    assert cli.main(["drill", "detection/boxes"]) == 0
    sandbox = drill.Sandbox(tmp_path, tmp_path / "practice")
    target = sandbox.file("detection/boxes")
    assert notebook.keep_other_work(sandbox, target, "detection/boxes", "x = 1\n") == ""  # a fresh stub
    target.write_text("# my editor's work\nx = 0\n")
    note = notebook.keep_other_work(sandbox, target, "detection/boxes", "x = 1\n")
    (copy,) = (tmp_path / ".mlcanon" / "attempts").rglob("boxes.py")
    assert copy.read_text() == "# my editor's work\nx = 0\n" and str(copy.relative_to(tmp_path)) in note
    notebook._written_by_cells[target] = b"x = 1\n"
    target.write_text("x = 1\n")  # what the last cell wrote: replaced without a copy
    assert notebook.keep_other_work(sandbox, target, "detection/boxes", "x = 2\n") == ""
    assert len(list((tmp_path / ".mlcanon" / "attempts").rglob("boxes.py"))) == 1
