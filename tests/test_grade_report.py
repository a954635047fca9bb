"""The teacher's report and spreadsheets (issue 18.4): ``report.html`` names the assignment and the
date, links each student to their feedback, sorts every column, colours failing, flagged, error and
timeout cells and fits its plots on the page, checked in headless chromium as well as in its source;
``gradebook.csv`` leaves empty cells empty; ``gradebook-lms.csv`` holds the points alone."""

from __future__ import annotations

import csv
import io
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pytest
from browser import chromium, elements, needs_chromium

from pytest_mlcanon.evidence import Status
from pytest_mlcanon.grade import config
from pytest_mlcanon.grade.gradebook import Gradebook, GradedTest, ItemResult, Recheck, StudentResult
from pytest_mlcanon.grade.render import csvfile, html, write_all
from pytest_mlcanon.grade.render.table import Mark
from pytest_mlcanon.rubric.model import AXES, AXIS_TITLES, Finding

DPO, ATTENTION = "posttrain/dpo", "transformer/attention"
HOSTILE = "<img src=x onerror=alert(1)>"
ALL_YES = dict.fromkeys(AXES, True)


def _item(slug: str, status: Status, verdict: str, points: float, *, axes: dict[str, bool] | None = None,
          score: int | None = None, recheck: str = "passed", flags: int = 0, time_s: float = 1.0) -> ItemResult:
    tests = [GradedTest(f"test_{n}", "passed" if n < (score or 0) else "failed", points=1.0, max_points=1.0)
             for n in range(5)] if status.scored else []
    integrity = [Finding("INT002", f"{slug}.py", 164, "patches the test machinery")] * flags
    return ItemResult(slug, 55 if slug == DPO else 42, slug, status, verdict, axes or {}, score, tests,
                      integrity=integrity, recheck=Recheck(recheck, "detail", 3), points=float(points), max_points=10.0,
                      time_s=time_s)


def class_book() -> Gradebook:
    """Nine students covering every mark, a hostile verdict and note, a long verdict, a missing cell."""
    no_correctness = {**ALL_YES, "correctness": False}
    long_verdict = "no 4/5: correctness failed (" + "; ".join(
        f"seeded re-check failed: dpo_loss(case {n}).margin: off by up to 0.3{n}" for n in range(12)) + ")"
    students = [
        StudentResult("ada", items=[_item(DPO, Status.SCORED, "strong 5/5", 10, axes=ALL_YES, score=5),
                                    _item(ATTENTION, Status.SCORED, "strong 5/5", 10, axes=ALL_YES, score=5)]),
        StudentResult("ben", items=[_item(DPO, Status.SCORED, long_verdict, 4, axes=no_correctness, score=4,
                                          recheck="failed", time_s=12.5),
                                    _item(ATTENTION, Status.SCORED, "strong 4/5", 9, axes={**ALL_YES, "api": False},
                                          score=4)]),
        StudentResult("cy", items=[_item(DPO, Status.NOT_ATTEMPTED, "not attempted: no posttrain/dpo.py", 0),
                                   _item(ATTENTION, Status.SCORED, "strong 5/5", 10, axes=ALL_YES, score=5)]),
        StudentResult("eli", items=[_item(DPO, Status.SCORED, "no 3/5", 2.5, axes=no_correctness, score=3),
                                    _item(ATTENTION, Status.ERROR, "error: SyntaxError at eli/attention.py:42", 0)]),
        StudentResult("fay", items=[_item(DPO, Status.SCORED, "strong 5/5", 10, axes=ALL_YES, score=5),
                                    _item(ATTENTION, Status.TIMEOUT, "timeout: test_x ran over 10 s", 1.5,
                                          axes=no_correctness, score=1, time_s=90.0)]),
        StudentResult("gus", items=[_item(DPO, Status.SCORED, "flagged: INT002 patches the test machinery", 0,
                                          axes=ALL_YES, score=5, flags=2),
                                    _item(ATTENTION, Status.SCORED, "strong 5/5", 10, axes=ALL_YES, score=5)]),
        StudentResult("hal", items=[_item(DPO, Status.HARNESS_ERROR, "harness error: the worker died", 0),
                                    _item(ATTENTION, Status.SCORED, f"no 2/5: {HOSTILE}", 1,
                                          axes=no_correctness, score=2)]),
        StudentResult("ivy", items=[_item(DPO, Status.SCORED, "strong 4/5", 8.25, axes={**ALL_YES, "numerics": False},
                                          score=4)]),  # graded on one item only: the other cell is missing
        StudentResult("=HYPERLINK(\"http://evil\")", problem=f"-2+3 {HOSTILE}",
                      items=[_item(DPO, Status.SCORED, "strong 5/5", 10, axes=ALL_YES, score=5),
                             _item(ATTENTION, Status.SCORED, "strong 5/5", 10, axes=ALL_YES, score=5)]),
    ]
    return Gradebook([DPO, ATTENTION], {DPO: "DPO loss", ATTENTION: "Scaled dot-product attention"}, students, [7],
                     notes=[f"a note with {HOSTILE}"], config={"assignment": "Homework 3 <b>"},
                     graded_at="2026-12-02T12:10:42+00:00")


# -- the page's source -------------------------------------------------------------------------------------------


def test_the_report_names_the_assignment_and_the_date() -> None:
    text = html.render(class_book())
    assert "<h1>Homework 3 &lt;b&gt;</h1>" in text
    assert "<title>Homework 3 &lt;b&gt;: mlcanon gradebook</title>" in text
    assert "graded 2026-12-02 12:10 UTC" in text
    undated = html.render(Gradebook([DPO]))
    assert "<h1>mlcanon gradebook</h1>" in undated and "date of grading not recorded" in undated


def test_the_assignment_comes_from_the_config_and_is_kept_in_the_gradebook() -> None:
    settings = config.from_table({"assignment": "  Homework 3 ", "items": [DPO]})
    assert settings.assignment == "Homework 3" and settings.to_dict()["assignment"] == "Homework 3"
    assert config.from_table({}).assignment == ""  # the batch then names it after the submissions folder
    with pytest.raises(config.ConfigError, match=r"assignment=3: must be a string"):
        config.from_table({"assignment": 3}, source="t.toml")


def test_each_student_links_to_the_feedback_the_grader_writes(tmp_path: Path) -> None:
    book = class_book()
    written = write_all(book, tmp_path)
    found = elements((tmp_path / "report.html").read_text(encoding="utf-8"))
    links = [a["href"] for a in found.having("a")]
    assert links[:len(book.students)] == [f"feedback/{s}.md" for s in ("ada", "ben", "cy", "eli", "fay", "gus", "hal",
                                                                        "ivy", "%3DHYPERLINK%28%22http%3A%2F%2Fevil%22%29")]
    assert len(links) == len(book.students) * 3 - 1  # the class table and the two item tables (ivy has one item)
    for href in links:
        assert not re.match(r"[a-z]+:|/|\.\.", href), href  # relative, inside --out
    assert {tmp_path / "feedback" / f"{s.student}.md" for s in book.students} <= set(written)


def test_cells_are_coloured_by_their_typed_mark() -> None:
    page = html.render(class_book())
    tables = re.split(r"<table ", page)[1:]
    marks = [Counter(c["class"] for c in elements(t).having("td") if "class" in c) for t in tables]
    # class: ben's, eli's DPO and hal's attention fail correctness; eli's attention and hal's DPO (harness)
    # are errors; fay's attention timed out; gus's DPO is flagged
    assert marks[0] == {"fail": 3, "error": 2, "timeout": 1, "flagged": 1}
    # DPO: ben's correctness, re-check and verdict; eli's correctness and verdict; ivy's numerics;
    # gus's integrity codes and verdict; hal's verdict
    assert marks[1] == {"fail": 6, "flagged": 2, "error": 1}
    # attention: ben's API; fay's correctness, time and verdict; hal's correctness and verdict; eli's verdict
    assert marks[2] == {"fail": 4, "timeout": 2, "error": 1}
    legend = [span["class"] for span in elements(page).having("span") if "class" in span]
    assert legend == [m.value for m in html.MARK_COLOURS] == ["fail", "flagged", "error", "timeout"]
    assert set(Mark) - set(html.MARK_COLOURS) == {Mark.PLAIN}


def test_a_cells_text_never_decides_its_colour() -> None:
    liar = _item(DPO, Status.SCORED, "NO FLAGGED error timeout failed", 10, axes=ALL_YES, score=5)
    liar.tests[0].outcome = "timeout"
    book = Gradebook([DPO], students=[StudentResult("NO-timeout-error", items=[liar])])
    assert not [c for c in elements(html.render(book)).having("td") if "class" in c]


def test_every_column_can_be_sorted_and_numbers_sort_as_numbers() -> None:
    text = html.render(class_book())
    found = elements(text)
    tables = found.having("table", class_="sortable")
    assert [t["data-table"] for t in tables] == ["class", DPO, ATTENTION]
    buttons = found.having("button", type="button")
    assert len(buttons) == 4 + 2 * 13 and len(found.having("th", scope="col")) == len(buttons)
    ada = [c["data-sort"] for c in found.having("td") if "data-sort" in c][:3]
    assert ada == ["5.0", "5.0", "20.0"]  # the class table's scores and points, as numbers
    assert "<script>" in text and "localeCompare" in text and "aria-sort" in text


def test_the_page_fetches_nothing_and_escapes_every_submitted_text() -> None:
    text = html.render(class_book())
    found = elements(text)
    assert not [a for _, a in found.tags if "src" in a and not a["src"].startswith("data:")]
    assert not found.having("link") and len(found.having("script")) == 1
    assert "<img src=x" not in text and text.count("&lt;img src=x onerror=alert(1)&gt;") == 2
    assert "=HYPERLINK(&quot;http://evil&quot;)" in text


def test_the_plots_are_svg_images_that_scale_to_the_page() -> None:
    pytest.importorskip("matplotlib")
    found = elements(html.render(class_book()))
    images = [i for i in found.having("img") if i["src"].startswith("data:image/svg+xml;base64,")]
    assert [i["alt"].rsplit(": ", 1)[1] for i in images] == [AXIS_TITLES[a] for a in AXES]
    assert ".plots img{width:100%;height:auto" in html.STYLE


# -- the spreadsheets --------------------------------------------------------------------------------------------


def _rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def test_the_csv_leaves_empty_cells_empty_and_guards_only_submitted_formulas() -> None:
    rows = _rows(csvfile.render(class_book()))
    header, cy = rows[0], rows[3]
    assert cy[header.index(f"{DPO} correctness")] == "" and cy[header.index(f"{DPO} score")] == ""
    ivy = rows[8]
    assert ivy[header.index(f"{ATTENTION} status")] == "" and ivy[header.index("points")] == "8.25"
    assert not any(cell.startswith("'") for row in rows[1:9] for cell in row)  # nothing but the hostile row
    hostile = rows[9]
    assert hostile[0] == "'=HYPERLINK(\"http://evil\")" and hostile[-1] == f"'-2+3 {HOSTILE}"
    assert hostile[header.index("points")] == "20"
    assert csvfile._safe("-1.5") == "-1.5" and csvfile._safe("") == ""
    assert csvfile._safe("-inf") == "'-inf" and csvfile._safe("-1_0") == "'-1_0" and csvfile._safe(" =1") == "' =1"


def test_the_lms_export_holds_student_total_and_each_items_points() -> None:
    assert _rows(csvfile.lms(class_book())) == [
        ["student", "total", DPO, ATTENTION],
        ["ada", "20", "10", "10"],
        ["ben", "13", "4", "9"],
        ["cy", "10", "0", "10"],  # not attempted is graded: 0
        ["eli", "2.5", "2.5", "0"],
        ["fay", "11.5", "10", "1.5"],
        ["gus", "10", "0", "10"],
        ["hal", "", "", "1"],  # the grader failed on hal's DPO: not graded, empty, and no total yet
        ["ivy", "", "8.25", ""],  # never graded on attention: a total would look final
        ["'=HYPERLINK(\"http://evil\")", "20", "10", "10"],
    ]
    unsandboxed = class_book()
    unsandboxed.unsandboxed = ["network"]
    assert _rows(csvfile.lms(unsandboxed))[0][1] == "total (unsandboxed)"
    assert _rows(csvfile.lms(Gradebook([DPO], students=[StudentResult("zoe")])))[1] == ["zoe", "", ""]
    unreached = [StudentResult("zoe", items=[_item(DPO, Status.PENDING, "", 0)])]  # a cell the batch never reached
    assert _rows(csvfile.lms(Gradebook([DPO], students=unreached)))[1] == ["zoe", "", ""]
    stopped = [StudentResult("zoe", items=[_item(DPO, Status.SCORED, "strong 5/5", 10),
                                           _item(ATTENTION, Status.INTERRUPTED, "", 0)])]
    assert _rows(csvfile.lms(Gradebook([DPO, ATTENTION], students=stopped)))[1] == ["zoe", "", "10", ""]


def test_write_all_writes_the_lms_export(tmp_path: Path) -> None:
    written = write_all(class_book(), tmp_path)
    assert tmp_path / "gradebook-lms.csv" in written
    assert (tmp_path / "gradebook-lms.csv").read_text(encoding="utf-8") == csvfile.lms(class_book())


# -- in a real browser -------------------------------------------------------------------------------------------

#: Appended to a copy of the report beside it: what the browser laid out, the links it resolved, and the
#: class table's order after a click on "points" and a second one, written into the DOM for --dump-dom.
HARNESS = """<script>
(function () {
  var out = document.createElement('pre');
  out.id = 'harness';
  var table = document.querySelector('table[data-table="class"]');
  var heads = table.tHead.rows[0].cells;
  function order() {
    return Array.prototype.map.call(table.tBodies[0].rows, function (r) { return r.dataset.student; }).join('|');
  }
  var root = document.documentElement;
  var result = {scrollWidth: root.scrollWidth, clientWidth: root.clientWidth, innerWidth: window.innerWidth,
                links: Array.prototype.map.call(table.querySelectorAll('a'), function (a) { return a.href; }),
                boxes: Array.prototype.map.call(document.querySelectorAll('.wide'), function (box) {
                  return box.scrollWidth - box.clientWidth; })};
  var points = heads[heads.length - 1];
  points.querySelector('button').click();
  result.ascending = [order(), points.getAttribute('aria-sort')];
  points.querySelector('button').click();
  result.descending = [order(), points.getAttribute('aria-sort')];
  heads[0].querySelector('button').click();
  result.byName = [order(), heads[0].getAttribute('aria-sort'), points.hasAttribute('aria-sort')];
  out.textContent = JSON.stringify(result);
  document.body.appendChild(out);
})();
</script>"""


def _harness(out: Path, width: int, profile: Path) -> dict[str, Any]:
    page = (out / "report.html").read_text(encoding="utf-8")
    harness = out / "harness.html"
    harness.write_text(page.replace("</body>", HARNESS + "</body>"), encoding="utf-8")
    dom = chromium(harness.as_uri(), f"--window-size={width},900", "--dump-dom", profile=profile)
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r"<pre id=\"harness\">(.*?)</pre>", dom.stdout)
    assert found is not None, dom.stdout[-2000:]
    return dict(json.loads(found.group(1).replace("&amp;", "&").replace("&quot;", '"')
                           .replace("&lt;", "<").replace("&gt;", ">")))


@needs_chromium
@pytest.mark.parametrize("width", [1400, 500])  # 500: headless chromium's narrowest window
def test_a_headless_browser_sorts_links_and_fits_the_report(width: int, tmp_path: Path,
                                                            tmp_path_factory: pytest.TempPathFactory) -> None:
    write_all(class_book(), tmp_path)
    result = _harness(tmp_path, width, tmp_path_factory.mktemp("chromium-profile"))
    assert result["innerWidth"] == width
    assert width - 20 < result["clientWidth"] <= width  # the vertical scroll bar takes its share
    assert result["scrollWidth"] == result["clientWidth"], "nothing runs past the right edge of the page"
    if width == 1400:  # every table fits without scrolling its box (a narrow page scrolls the wide ones)
        assert result["boxes"] == [0, 0, 0]
    links = [str(link) for link in result["links"]]
    assert len(links) == 9 and all(link.startswith(tmp_path.as_uri() + "/feedback/") for link in links)
    assert all(Path(unquote(urlparse(link).path)).is_file() for link in links)
    hostile = '=HYPERLINK("http://evil")'
    assert result["ascending"] == [f"hal|eli|ivy|cy|gus|fay|ben|ada|{hostile}", "ascending"]
    assert result["descending"] == [f"ada|{hostile}|ben|fay|cy|gus|ivy|eli|hal", "descending"]
    assert result["byName"] == [f"{hostile}|ada|ben|cy|eli|fay|gus|hal|ivy", "ascending", False]


@needs_chromium
def test_a_headless_browser_screenshot_of_the_report(tmp_path: Path,
                                                     tmp_path_factory: pytest.TempPathFactory) -> None:
    from PIL import Image  # the test extra's pillow

    write_all(class_book(), tmp_path)
    shot = tmp_path / "report.png"
    taken = chromium((tmp_path / "report.html").as_uri(), "--window-size=1400,1600", f"--screenshot={shot}",
                     profile=tmp_path_factory.mktemp("chromium-profile"))
    assert taken.returncode == 0 and shot.is_file(), taken.stderr[-2000:]
    image = Image.open(shot).convert("RGB")
    assert image.size == (1400, 1600)
    colours = Counter({colour: count for count, colour in image.getcolors(image.width * image.height)})
    white = colours[(255, 255, 255)] / (1400 * 1600)
    assert 0.3 < white < 0.97, white  # a page with content, not a blank or an error page
    for mark, (colour, _) in html.MARK_COLOURS.items():
        rgb = tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))
        assert colours[rgb] > 200, mark  # the legend's swatch and the marked cells are painted
    if html.matplotlib_available():
        bars = (0x4c, 0x72, 0xb0)
        assert colours[bars] > 2000, "the histograms are drawn"
