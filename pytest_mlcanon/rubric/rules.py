"""The rule registry: every finding code the rubric can emit, what it flags, why an interviewer
cares, a bad and a good example, and how to turn it off.

``docs/rules.md`` is generated from this table (``python -m pytest_mlcanon.rubric.rules``) and a
test keeps the two equal, and keeps every code the rule modules emit registered here.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from pytest_mlcanon.rubric.model import AXIS_TITLES


@dataclass(frozen=True)
class Rule:
    code: str
    axis: str
    flags: str
    why: str
    bad: str
    good: str


RULES: tuple[Rule, ...] = (
    Rule("COR001", "correctness", "a reference test of the item failed or errored",
         "the interview's first question is whether it works, edge cases included",
         "return margin  # computed as rejected - chosen", "return margin  # chosen - rejected, as the spec"),
    Rule("COR002", "correctness", "a public name of the item's API is missing from your module, or a test cannot call "
         "it with the API's signature (a TypeError at the call: a missing keyword, a wrong number of arguments), "
         "reported once per function, probes included",
         "the caller (and the items built on yours) expect the spec's names and signatures",
         "def dpo(pc, pr, rc, rr): ...", "def dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta=0.1): ..."),
    Rule("COR003", "correctness", "no reference test of the item ran (all deselected or skipped)",
         "a score without evidence is not a score", "pytest --canon-item=55 -k nothing", "pytest --canon-item=55"),
    Rule("COR004", "correctness", "the file cannot be parsed",
         "nothing else can be judged until it runs", "def f(:", "def f(x):"),
    Rule("SHP001", "shapes", "a line that creates, reshapes, contracts or reduces a tensor has no shape comment on "
         "any of its lines (conversions such as np.asarray, *_like, empty early returns and shape-preserving "
         "modules make no new shape and need none)",
         "saying the shape aloud before typing the line is how shape bugs are avoided; graders read down the column",
         "scores = q @ k.transpose(-2, -1)", "scores = q @ k.transpose(-2, -1)   # (B, H, T_q, T_k)"),
    Rule("SHP002", "shapes", "a shape comment is contradicted by the value at run time",
         "a wrong comment is worse than none: it documents the bug",
         "heads = x.view(B, T, H, d_h).transpose(1, 2)  # (B, T, H, d_h)",
         "heads = x.view(B, T, H, d_h).transpose(1, 2)  # (B, H, T, d_h)"),
    Rule("SHP003", "shapes", "a shape comment does not follow the grammar (canon-spec C4)",
         "a comment the checker cannot read cannot be verified", "x = y.sum(-1)  # (N)", "x = y.sum(-1)  # (N,)"),
    Rule("NUM001", "numerics", "exp of unshifted values normalised by their sum, in one expression or across "
         "statements (`e = exp(x)` ... `e / e.sum(...)`)",
         "exp(1000) overflows to inf and inf/inf is NaN; the max-subtraction is the classic probe",
         "e = torch.exp(x); p = e / e.sum(-1, keepdim=True)",
         "e = torch.exp(x - x.amax(-1, keepdim=True)); p = e / e.sum(-1, keepdim=True)"),
    Rule("NUM002", "numerics", "a mask filled with -inf that can reach a softmax (not a sentinel only argmax or sort "
         "reads, nor an output the contract specifies with -inf: generation's top-k/top-p filters, retrieval padding)",
         "a fully masked row becomes softmax(-inf, ..., -inf) = NaN, which leaks into gradients",
         "scores.masked_fill(~mask, float('-inf'))", "scores.masked_fill(~mask, torch.finfo(scores.dtype).min)"),
    Rule("NUM003", "numerics", "eps added outside the square root of a variance",
         "sqrt has an infinite derivative at 0; sqrt(var + eps) keeps the gradient finite (Adam's sqrt(v_hat) + eps "
         "and GRPO's std + eps are the published forms and are not flagged)",
         "x_hat = (x - mu) / (torch.sqrt(var) + eps)", "x_hat = (x - mu) / torch.sqrt(var + eps)"),
    Rule("NUM004", "numerics", "log of a softmax or sigmoid",
         "the probability underflows to 0 for confident logits and its log is -inf",
         "torch.log(torch.softmax(logits, -1))", "torch.log_softmax(logits, -1)"),
    Rule("NUM005", "numerics", "a hard-coded mask constant beyond float16's range (65504)",
         "-1e9 becomes -inf in half precision, and the -inf problems come back",
         "scores.masked_fill(~mask, -1e9)", "scores.masked_fill(~mask, torch.finfo(scores.dtype).min)"),
    Rule("NUM100", "numerics", "a numerics probe of the item failed (extreme logits, fp16, fully masked rows...)",
         "the probes are the inputs an interviewer tries after the happy path",
         "weights = scores.softmax(-1)  # NaN on an all-masked row", "finite mask value and zeros for empty rows"),
    Rule("API001", "api", "`.T` or `np.transpose` without axes on a 3-D or larger tensor, seen from a name's "
         "shape comment or, for any `.T` (an argument, a call result), from its operand's ndim at run time",
         "it reverses every axis (torch deprecates it); only the last two were meant to swap",
         "scores = q @ k.T  # k is (B, H, T, d_h)", "scores = q @ k.transpose(-2, -1)   # (B, H, T_q, T_k)"),
    Rule("API002", "api", "`.view` right after `transpose`/`permute`",
         "the transposed tensor is not contiguous; `.view` raises or forces a copy elsewhere",
         "x.transpose(1, 2).view(B, T, d)", "x.transpose(1, 2).reshape(B, T, d)"),
    Rule("API003", "api", "a Python double loop over tensor elements",
         "interviewers expect the vectorised form; the loop is slow by 100x and hides the shapes",
         "for i in range(len(a)):\n    for j in range(len(b)): d[i, j] = ((a[i] - b[j]) ** 2).sum()",
         "d = (a**2).sum(1)[:, None] - 2 * a @ b.T + (b**2).sum(1)[None, :]"),
    Rule("API004", "api", "a deprecated API", "it signals stale knowledge and may be gone in the next release",
         "torch.symeig(a)", "torch.linalg.eigh(a)"),
    Rule("API005", "api", "a library shortcut this item forbids (the catalog lists them per item)",
         "the drill is to write it yourself", "F.scaled_dot_product_attention(q, k, v)",
         "weights = stable_softmax(q @ k.transpose(-2, -1) * scale); out = weights @ v"),
    Rule("API006", "api", "a timed attempt ran past its allowance (under --timed=strict)",
         "stalling is what the seed's rubric calls a lack of fluency", "45 min on a 15 min item",
         "drill it again from memory"),
    Rule("API007", "api", "NumPy's legacy global RNG (`np.random.seed`, `np.random.rand`...)",
         "global state makes results depend on call order; the spec passes a seed or a Generator",
         "np.random.seed(0); x = np.random.randn(3)", "rng = np.random.default_rng(seed); x = rng.normal(size=3)"),
    Rule("EXP001", "explanation", "no module docstring",
         "narrating the plan before writing is half of the explanation axis", "(no docstring)",
         '"""Scaled dot-product attention. Subtle point: ... Shapes: (B, H, T, d_h). Test: ..."""'),
    Rule("EXP002", "explanation", "a public function or class without a docstring",
         "the caller needs the shapes, dtypes and errors", "def box_iou(a, b):",
         'def box_iou(a, b):\n    """(N, 4), (M, 4) xyxy -> (N, M) IoU; ValueError on x2 < x1."""'),
    Rule("EXP003", "explanation", "a module docstring too short to state a plan (mlcanon_docstring_min_words)",
         "one line does not say what is subtle", '"""Attention."""',
         '"""Attention with a finite mask value, because an all-masked row of -inf softmaxes to NaN. ..."""'),
    Rule("EXP004", "explanation", "no docstring states a shape (a tuple the shape grammar reads, or `scalar`, "
         "`same shape as`, `2-D`, `Shapes: none`); a file with no tensor line has none to state",
         "shapes are the interface of every tensor function",
         '"""Computes the loss."""', '"""(B, T, V) logits, (B, T) labels -> () mean loss."""'),
    Rule("EXP005", "explanation", "no trade-off or reason is stated",
         "naming the trade-off when you choose is what separates a hire from a pass",
         '"""Uses log_softmax."""', '"""Uses log_softmax rather than log(softmax) because the latter underflows."""'),
    Rule("EXP006", "explanation", "nothing says what you would test",
         "telling the interviewer what you would test closes the loop", '"""Computes IoU."""',
         '"""... Test: IoU of identical boxes is 1, disjoint is 0, and the gradient of GIoU is non-zero."""'),
)

BY_CODE = {rule.code: rule for rule in RULES}


def render_markdown() -> str:
    """``docs/rules.md``."""
    lines = [
        "# Rubric rules",
        "",
        "Generated from `pytest_mlcanon/rubric/rules.py` by `python -m pytest_mlcanon.rubric.rules`; do not edit.",
        "",
        "Turn a rule off with `--canon-ignore=CODE` (or a prefix such as `NUM`), the ini key `mlcanon_ignore`,",
        "or `ignore = [\"CODE\"]` under `[tool.mlcanon]` in pyproject.toml.",
    ]
    for axis, title in AXIS_TITLES.items():
        lines += ["", f"## {title}"]
        for rule in (r for r in RULES if r.axis == axis):
            lines += ["", f"### {rule.code}: {rule.flags}", "", f"Why it matters: {rule.why}.", "",
                      "Bad:", "", "```python", rule.bad, "```", "", "Good:", "", "```python", rule.good, "```", "",
                      f"Turn off: `--canon-ignore={rule.code}`."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render_markdown())
