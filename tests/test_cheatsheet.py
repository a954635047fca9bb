"""The NumPy <-> PyTorch cheat sheet: every row executes, its two columns agree, the docs page is in sync."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pytest_mlcanon import cli
from pytest_mlcanon.chapters import cheatsheet

REPO = Path(__file__).resolve().parents[1]
SEEDS = (0, 1, 2)


@pytest.mark.parametrize("row", cheatsheet.rows(), ids=lambda r: f"{r.number}-{r.op[:40]}")
def test_both_columns_of_every_row_agree_on_random_inputs(row: cheatsheet.Row) -> None:
    for seed in SEEDS:
        assert cheatsheet.check(row, seed) == "", f"seed {seed}"


# A wrong PyTorch column for a row: the mistake the row's gotcha warns about. The checker must catch each.
MISTAKES = {
    "variance as normalisation layers use it (biased)": "x.var(dim=-1)",
    "repeat each element (GQA's repeat_kv)": "x.repeat(2, 1)",
    "split into three equal parts": "torch.split(x, 3, dim=1)",
    "drop one size-1 axis": "x.squeeze()",
    "one-hot encode": "F.one_hot(idx, 5)",
    "swap the last two axes of a batch (K transposed)": "x.permute(2, 1, 0)",
    "softmax": "torch.exp(x) / torch.exp(x).sum(-1, keepdim=True)",
    "causal mask: True above the diagonal": "torch.triu(torch.ones(n, n, dtype=torch.bool))",
    "sum rows into buckets (k-means update, scatter-add)": "out = torch.zeros(4, x.shape[1]); out[idx] += x; out",
    "count labels (a histogram of integers)": "torch.bincount(idx)",
    "log(1 + x) and e^x - 1 near zero": "(torch.log(1 + x), torch.exp(x) - 1)",
    "random permutation": "torch.arange(n - 1)",
}


@pytest.mark.parametrize("op", sorted(MISTAKES))
def test_a_row_whose_columns_disagree_is_caught(op: str) -> None:
    (row,) = [r for r in cheatsheet.rows() if r.op == op]
    broken = dataclasses.replace(row, torch=MISTAKES[op])
    assert any(cheatsheet.check(broken, seed) for seed in SEEDS)


def test_the_sheet_covers_the_seeds_sections_and_every_row_has_a_gotcha() -> None:
    keys = {key for key, _ in cheatsheet.sections()}
    assert {"stable", "blank"} <= keys  # "plus the numerically stable patterns and what to reach for when you blank"
    assert all(any(r.section == key for r in cheatsheet.rows()) for key in keys)
    assert len(cheatsheet.rows()) >= 50
    assert all(len(r.gotcha) > 30 for r in cheatsheet.rows())
    assert len({r.op for r in cheatsheet.rows()}) == len(cheatsheet.rows())


def test_docs_cheatsheet_is_generated_from_the_rows() -> None:
    assert (REPO / "docs" / "cheatsheet.md").read_text(encoding="utf-8") == cheatsheet.markdown(), (
        "docs/cheatsheet.md is stale: regenerate it with `mlcanon cheatsheet --markdown > docs/cheatsheet.md`")


def test_mlcanon_cheatsheet_prints_the_rows_matching_a_term(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["cheatsheet", "view"]) == 0
    out = capsys.readouterr().out
    assert "x.transpose(1, 2).reshape(2, 5, -1)" in out and ".contiguous().view" in out
    assert "keepdim" not in out  # only the matching rows
    assert cli.main(["cheatsheet", "gather", "index"]) == 0
    assert "x.gather(1, idx[:, None]).squeeze(1)" in capsys.readouterr().out


def test_a_term_nothing_matches_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["cheatsheet", "qwertyuiop"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert cli.main(["cheatsheet", "view", "--markdown"]) == 2
