"""The rule registry: every finding code the project can emit (the rubric's and the grader's
integrity codes), what it flags, why an interviewer cares, a bad and a good example, the message
and fix hint of its findings, and the phrase the miss log uses for it.

Findings are made only here, by :func:`finding` (``Rule.finding``): a rule module names the code,
the place and the facts, never the wording. ``docs/rules.md`` is generated from this table
(``python -m pytest_mlcanon.rubric > docs/rules.md``); ``tests/test_rules_registry.py``
keeps the two equal and checks that every code the package uses is registered and every
registered code is used.

Adding a rule: a ``Rule`` below (code, axis, what it flags, why, bad and good examples, message
and hint templates, miss-log phrase), a ``finding("CODE", path, line, ...)`` where it fires, a test
that pins it, and the regenerated docs.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any

from pytest_mlcanon.rubric.model import AXIS_TITLES, Finding

INTEGRITY = "integrity"


@dataclass(frozen=True)
class Rule:
    """One finding code. ``message`` and ``hint`` are ``str.format`` templates over the facts a
    finding passes (``{subject}`` is the name it is about; ``{flags}`` is this rule's own text);
    ``miss`` is the miss log's phrase (None: a failing test or the timer names that miss)."""

    code: str
    axis: str  # one of rubric.model.AXES, or "integrity" (the grader's codes)
    flags: str  # what it flags; the title of an integrity code
    why: str = ""
    bad: str = ""
    good: str = ""
    message: str = "{flags}"
    hint: str = ""
    miss: str | None = None

    @property
    def title(self) -> str:
        return self.flags

    @property
    def fields(self) -> set[str]:
        """The facts the templates need."""
        return {name for template in (self.message, self.hint)
                for _, name, _, _ in string.Formatter().parse(template) if name} - {"flags"}

    def finding(self, path: str, line: int, *, subject: str = "", hint: str | None = None, **facts: Any) -> Finding:
        """A finding of this rule at ``path:line``; ``hint`` replaces the rule's hint when a site knows a
        more specific fix (a malformed comment's own)."""
        values = {"flags": self.flags, "subject": subject, **facts}
        return Finding(self.code, path, line, self.message.format(**values),
                       hint if hint is not None else self.hint.format(**values), subject)


RULES: tuple[Rule, ...] = (
    Rule("COR001", "correctness", "a reference test of the item failed or errored",
         "the interview's first question is whether it works, edge cases included",
         "return margin  # computed as rejected - chosen", "return margin  # chosen - rejected, as the spec",
         message="{test} {outcome}: {detail}",
         hint="run it alone: `pytest --canon-item={item} -k {keyword}` (a partial run, not recorded)",
         miss=None),
    Rule("COR002", "correctness", "a public name of the item's API is missing from your module, or a test cannot call "
         "it with the API's signature (a TypeError at the call: a missing keyword, a wrong number of arguments), "
         "reported once per function, probes included",
         "the caller (and the items built on yours) expect the spec's names and signatures",
         "def dpo(pc, pr, rc, rr): ...", "def dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta=0.1): ...",
         message="`{subject}` {problem}",
         hint="export every name of the item's API with the parameters, keywords and defaults its stub declares",
         miss="missing public name"),
    Rule("COR003", "correctness", "no reference test of the item ran (every one skipped, or only numerics probes ran)",
         "a score without evidence is not a score", "pytest.importorskip('scipy')  # skips every test of the item",
         "pip install 'pytest-mlcanon[test]'  # the tests' own dependencies",
         message="no reference test of the item ran{instead}",
         hint="see why the item's tests were skipped (pytest -rs)",
         miss=None),
    Rule("COR004", "correctness", "the file cannot be parsed",
         "nothing else can be judged until it runs", "def f(:", "def f(x):",
         message="the file cannot be parsed: {error}",
         hint="fix the syntax error",
         miss="syntax error"),
    Rule("COR005", "correctness", "the run ended (a timeout, a crash, a limit, an exit) before some of the item's "
         "tests reported: they count as failed, under one finding (grading only)",
         "a partial run is not an attempt: what never ran proves nothing",
         "while True: pass  # the test's time limit ends the run", "return the answer in the time a test allows",
         message="{tests} never reported ({names})",
         hint="make the whole run finish: the verdict says what ended it",
         miss=None),
    Rule("REC001", "correctness", "the grader's seeded re-check failed: fresh inputs give other outputs than the "
         "reference's, or the calls never answered (grading only)",
         "fresh inputs catch answers fitted to the public examples; a grade rests on them",
         "return torch.tensor([[0.5]])  # the example's expected IoU", "compute the IoU from the boxes given",
         message="seeded re-check {outcome}: {problems}",
         hint="compute the answer from the inputs: fresh inputs must give the reference's outputs"),
    Rule("SHP001", "shapes", "a line that creates, reshapes, contracts or reduces a tensor has no shape comment on "
         "any of its lines (conversions such as np.asarray, *_like, empty early returns and shape-preserving "
         "modules make no new shape and need none)",
         "saying the shape aloud before typing the line is how shape bugs are avoided; graders read down the column",
         "scores = q @ k.transpose(-2, -1)", "scores = q @ k.transpose(-2, -1)   # (B, H, T_q, T_k)",
         message="missing shape comment: this line is a shape line ({reason}){words}",
         hint="end the line with the shape of what it binds, e.g. `# (B, T, d)`",
         miss="shape comments missing"),
    Rule("SHP002", "shapes", "a shape comment is contradicted by the value at run time",
         "a wrong comment is worse than none: it documents the bug",
         "heads = x.view(B, T, H, d_h).transpose(1, 2)  # (B, T, H, d_h)",
         "heads = x.view(B, T, H, d_h).transpose(1, 2)  # (B, H, T, d_h)",
         message="wrong shape comment: {detail}",
         hint="correct the comment (or the code): the comment must state the value's real shape",
         miss="wrong shape comment"),
    Rule("SHP003", "shapes", "a shape comment does not follow the grammar (docs/contract.md C4)",
         "a comment the checker cannot read cannot be verified", "x = y.sum(-1)  # (N)", "x = y.sum(-1)  # (N,)",
         message="malformed shape comment: {error}",
         hint="follow the C4 grammar: `# (B, T, d)`, `# ()`, `# (N,)`, `# list[N]`",
         miss="malformed shape comment"),
    Rule("NUM001", "numerics", "exp of unshifted values normalised by their sum, in one expression or across "
         "statements (`e = exp(x)` ... `e / e.sum(...)`)",
         "exp(1000) overflows to inf and inf/inf is NaN; the max-subtraction is the classic probe",
         "e = torch.exp(x); p = e / e.sum(-1, keepdim=True)",
         "e = torch.exp(x - x.amax(-1, keepdim=True)); p = e / e.sum(-1, keepdim=True)",
         message="exp of unshifted values is normalised by its sum: overflows to inf/inf = NaN for logits near 1e3",
         hint="subtract the row max first (x - x.max(dim, keepdim=True)) or use softmax/logsumexp",
         miss="exp without subtracting the max"),
    Rule("NUM002", "numerics", "a mask filled with -inf that can reach a softmax (not a sentinel only argmax or sort "
         "reads or picks one entry of, nor log 0 as in where(p > 0, log(p), -inf) or np.log(p, out=a, where=p > 0) "
         "into a -inf-filled a, nor a top-k filter masked_fill(x < kth, -inf) whose "
         "kth comes from topk/kthvalue/sort, nor a softmax whose NaN rows the same function repairs (nan_to_num, where or masked_fill on its result), "
         "nor an output the contract specifies with -inf: generation's top-k/top-p filters, retrieval padding)",
         "a fully masked row becomes softmax(-inf, ..., -inf) = NaN, which leaks into gradients",
         "scores.masked_fill(~mask, float('-inf'))", "scores.masked_fill(~mask, torch.finfo(scores.dtype).min)",
         message="{what} -inf before a softmax: a fully masked row softmaxes to NaN",
         hint="fill with the dtype's most negative finite value: torch.finfo(dtype).min, np.finfo(dtype).min for "
              "arrays",
         miss="-inf mask fill"),
    Rule("NUM003", "numerics", "eps added outside the square root of a variance",
         "sqrt has an infinite derivative at 0; sqrt(var + eps) keeps the gradient finite (Adam's sqrt(v_hat) + eps "
         "and GRPO's std + eps are the published forms and are not flagged)",
         "x_hat = (x - mu) / (torch.sqrt(var) + eps)", "x_hat = (x - mu) / torch.sqrt(var + eps)",
         message="eps added outside the sqrt: sqrt(var) has an infinite gradient at var = 0",
         hint="write sqrt(var + eps)",
         miss="eps outside sqrt"),
    Rule("NUM004", "numerics", "log of a softmax or sigmoid",
         "the probability underflows to 0 for confident logits and its log is -inf",
         "torch.log(torch.softmax(logits, -1))", "torch.log_softmax(logits, -1)",
         message="log of {subject}: underflows to log(0) = -inf for confident logits",
         hint="use log_softmax / logsigmoid (F.logsigmoid, -np.logaddexp(0, -x))",
         miss="log of softmax/sigmoid (use log_softmax/logsigmoid)"),
    Rule("NUM005", "numerics", "a hard-coded mask constant beyond float16's range (65504), unless filled into a "
         "float32/float64 upcast (x.float().masked_fill(...), or a name assigned x.to(torch.float32))",
         "-1e9 becomes -inf in half precision, and the -inf problems come back",
         "scores.masked_fill(~mask, -1e9)", "scores.masked_fill(~mask, torch.finfo(scores.dtype).min)",
         message="hard-coded mask constant beyond float16's range (65504): it becomes -inf in half precision",
         hint="use torch.finfo(dtype).min",
         miss="mask constant overflows fp16"),
    Rule("NUM100", "numerics", "a numerics probe of the item failed (extreme logits, fp16, fully masked rows...)",
         "the probes are the inputs an interviewer tries after the happy path",
         "weights = scores.softmax(-1)  # NaN on an all-masked row", "finite mask value and zeros for empty rows",
         message="numerics probe {test} failed: {detail}",
         hint="make the probe pass: {condition}",
         miss=None),
    Rule("API001", "api", "`.T` or `np.transpose` without axes on a 3-D or larger tensor, seen from a name's "
         "shape comment or, for any `.T` (an argument, a call result), from its operand's ndim at run time",
         "it reverses every axis (torch deprecates it); only the last two were meant to swap",
         "scores = q @ k.T  # k is (B, H, T, d_h)", "scores = q @ k.transpose(-2, -1)   # (B, H, T_q, T_k)",
         message="{subject} reverses every axis of a {rank} value{seen}; only the last two were meant to swap",
         hint="use .transpose(-2, -1) or .mT (np.swapaxes(x, -1, -2) for arrays)",
         miss="silent full transpose (.T on 3-D+; transpose(-2, -1) for K)"),
    Rule("API002", "api", "`.view` right after `transpose`/`permute`",
         "the transposed tensor is not contiguous; `.view` raises or forces a copy elsewhere",
         "x.transpose(1, 2).view(B, T, d)", "x.transpose(1, 2).reshape(B, T, d)",
         message=".view on a transposed (non-contiguous) tensor raises at run time or needs a silent copy elsewhere",
         hint="use .reshape(...), or .contiguous().view(...)",
         miss=".view after transpose"),
    Rule("API003", "api", "a Python double loop over tensor elements",
         "interviewers expect the vectorised form; the loop is slow by 100x and hides the shapes",
         "for i in range(len(a)):\n    for j in range(len(b)): d[i, j] = ((a[i] - b[j]) ** 2).sum()",
         "d = (a**2).sum(1)[:, None] - 2 * a @ b.T + (b**2).sum(1)[None, :]",
         message="Python double loop over tensor elements where the item expects vectorised code",
         hint="vectorise the loop that is not a recurrence: broadcast (a[:, None, :] - b[None, :, :]), one "
         "matmul, or a whole-row operation; a loop over time steps that each need the last one may stay",
         miss="Python loop over elements"),
    Rule("API004", "api", "a deprecated API", "it signals stale knowledge and may be gone in the next release",
         "torch.symeig(a)", "torch.linalg.eigh(a)",
         message="`{subject}` is deprecated",
         hint="use {replacement}",
         miss="deprecated API"),
    Rule("API005", "api", "a library shortcut this item forbids (the catalog lists them per item)",
         "the drill is to write it yourself", "F.scaled_dot_product_attention(q, k, v)",
         "weights = stable_softmax(q @ k.transpose(-2, -1) * scale); out = weights @ v",
         message="`{subject}` is a forbidden shortcut for {item}: the drill is to write it yourself",
         hint="implement it from the formula",
         miss="forbidden shortcut"),
    Rule("API006", "api", "a timed attempt ran past its allowance (under --timed=strict)",
         "stalling is what the seed's rubric calls a lack of fluency", "45 min on a 15 min item",
         "drill it again from memory",
         message="{elapsed:.1f} min against {allowed:.0f} allowed ({attempt}, target {target} min, timed from {started_from})",
         hint="drill it again from memory: `mlcanon reset {slug}` restarts the clock",
         miss=None),
    Rule("API007", "api", "NumPy's legacy global RNG (`np.random.seed`, `np.random.rand`...)",
         "global state makes results depend on call order; the spec passes a seed or a Generator",
         "np.random.seed(0); x = np.random.randn(3)", "rng = np.random.default_rng(seed); x = rng.normal(size=3)",
         message="`np.random.{subject}` uses the legacy global RNG",
         hint="take a seed and use rng = np.random.default_rng(seed)",
         miss="legacy np.random global RNG"),
    Rule("EXP001", "explanation", "no module docstring",
         "narrating the plan before writing is half of the explanation axis", "(no docstring)",
         '"""Scaled dot-product attention. Subtle point: ... Shapes: (B, H, T, d_h). Test: ..."""',
         message="no module docstring: the plan is not written down",
         hint="open the file with what it implements, the subtle point, the shapes and what you would test",
         miss="no plan in the module docstring"),
    Rule("EXP002", "explanation", "a public function or class without a docstring",
         "the caller needs the shapes, dtypes and errors", "def box_iou(a, b):",
         'def box_iou(a, b):\n    """(N, 4), (M, 4) xyxy -> (N, M) IoU; ValueError on x2 < x1."""',
         message="public {kind} `{subject}` has no docstring",
         hint="state its shapes, dtypes and the errors it raises",
         miss="public function without a docstring"),
    Rule("EXP003", "explanation", "a module docstring too short to state a plan (mlcanon_docstring_min_words)",
         "one line does not say what is subtle", '"""Attention."""',
         '"""Attention with a finite mask value, because an all-masked row of -inf softmaxes to NaN. ..."""',
         message="module docstring has {words} words; a plan needs at least {needed}",
         hint="say what the module does and the subtle point",
         miss="plan too short"),
    Rule("EXP004", "explanation", "no docstring states a shape (a tuple the shape grammar reads, or `scalar`, "
         "`same shape as`, `2-D`, `Shapes: none`); a file with no tensor line has none to state",
         "shapes are the interface of every tensor function",
         '"""Computes the loss."""', '"""(B, T, V) logits, (B, T) labels -> () mean loss."""',
         message="no docstring states a shape",
         hint="write the shapes in a docstring, such as (B, T, d) -> (B, T, V), or `scalar`",
         miss="no shapes in the docstrings"),
    Rule("EXP005", "explanation", "no trade-off or reason is stated",
         "naming the trade-off when you choose is what separates a hire from a pass",
         '"""Uses log_softmax."""', '"""Uses log_softmax rather than log(softmax) because the latter underflows."""',
         message="no trade-off or reason is stated",
         hint="say why a choice was made with a reason word (`because ...`, `instead of ...`, `rather than ...`, "
              "`since ...`, `so that ...`, `X is cheaper than Y`)",
         miss="no trade-off stated"),
    Rule("EXP006", "explanation", "nothing says what you would test",
         "telling the interviewer what you would test closes the loop", '"""Computes IoU."""',
         '"""... Test: IoU of identical boxes is 1, disjoint is 0, and the gradient of GIoU is non-zero."""',
         message="nothing says what you would test",
         hint="list the checks: a closed-form value, a gradient check, an edge case",
         miss="nothing on what you would test"),
)

INTEGRITY_RULES: tuple[Rule, ...] = tuple(Rule(code, INTEGRITY, title, message="{flags}{detail}", hint=hint) for code, title, hint in (
    ("INT001", "ends, signals or limits a process", "return a value or raise an exception; never exit the grader"),
    ("INT002", "patches the test machinery or another module's functions",
     "never assign to another module's attributes, register pytest hooks or touch sys.modules"),
    ("INT003", "imports the reference implementation of the item under test", "write the item yourself"),
    ("INT004", "reads the tests or inspects its caller's frames",
     "an implementation needs only its arguments: no test files, frames or gc"),
    ("INT005", "uses a forbidden library shortcut for this item", "implement it from the formula"),
    ("INT006", "touches the file system", "an implementation reads its arguments and returns values"),
    ("INT007", "starts a process or a thread", "compute in the calling thread"),
    ("INT008", "uses the network", "no network access is needed or allowed"),
    ("INT009", "runs code the scan cannot read (exec, eval, importlib, ctypes, code objects)", "write plain Python"),
    ("INT010", "passes the reference tests but fails the seeded re-check on fresh inputs",
     "see the seeded re-check for the call and the values that differ: the same code on fresh inputs "
     "disagreed with the reference (as answers that fit only the public examples would)"),
    ("INT011", "is a verbatim copy of the reference implementation", "write the item yourself"),
    ("INT101", "wrote outside its folder (blocked)", "write nothing; return values"),
    ("INT102", "opened a test file or the reference (blocked)", "an implementation needs only its arguments"),
    ("INT103", "tried to use the network (blocked)", "no network access is needed or allowed"),
    ("INT104", "tried to start a process or a thread (blocked)", "compute in the calling thread"),
    ("INT105", "inspected the grader's frames or objects (blocked)", "an implementation needs only its arguments"),
    ("INT106", "tampered with the test machinery while running", "leave other modules' functions alone"),
    ("INT107", "forged or corrupted the result channel", "print nothing to file descriptors you did not open"),
    ("INT108", "ran dynamic or native code (blocked)", "write plain Python"),
    ("INT109", "tried to signal or limit another process (blocked)", "return a value or raise an exception"),
    ("INT110", "left processes running after the job ended", "start no process; return when done"),
))

BY_CODE = {rule.code: rule for rule in (*RULES, *INTEGRITY_RULES)}


def finding(code: str, path: str, line: int, *, subject: str = "", hint: str | None = None, **facts: Any) -> Finding:
    """The one way a finding is made: the registered rule's message and hint over ``facts``."""
    return BY_CODE[code].finding(path, line, subject=subject, hint=hint, **facts)


def integrity_finding(code: str, path: str, line: int, detail: str = "") -> Finding:
    """An integrity finding: the rule's title, then the specific detail when there is one."""
    return finding(code, path, line, detail=f": {detail}" if detail else "")


def miss(code: str) -> str | None:
    """The miss log's phrase for a code (None: a failing test or the timer names that miss)."""
    rule = BY_CODE.get(code)
    return rule.miss if rule is not None else None


def render_markdown() -> str:
    """``docs/rules.md``."""
    lines = [
        "# Rules",
        "",
        "Generated from `pytest_mlcanon/rubric/rules.py` by `python -m pytest_mlcanon.rubric > docs/rules.md`;",
        "do not edit.",
        "",
        "Turn a rubric rule off with `--canon-ignore=CODE` (or a prefix such as `NUM`), the ini key `mlcanon_ignore`,",
        "or `ignore = [\"CODE\"]` under `[tool.mlcanon]` in pyproject.toml.",
    ]
    for axis, title in AXIS_TITLES.items():
        lines += ["", f"## {title}"]
        for rule in (r for r in RULES if r.axis == axis):
            lines += ["", f"### {rule.code}: {rule.flags}", "", f"Why it matters: {rule.why}.", "",
                      "Bad:", "", "```python", rule.bad, "```", "", "Good:", "", "```python", rule.good, "```", "",
                      f"Fix: {_plain(rule.hint)}.", ""]
            if rule.miss:
                lines += [f"In the miss log: *{rule.miss}*.", ""]
            lines += [f"Turn off: `--canon-ignore={rule.code}`."]
    lines += ["", "## Integrity (grading)", "",
              "`mlcanon grade` flags a submission with these codes (`INT0xx` from reading the files, `INT1xx`",
              "while the code runs); the teacher's `on_flag` decides whether a flagged item scores zero. They cannot",
              "be turned off.", "", "| code | flags | fix |", "|---|---|---|"]
    lines += [f"| {rule.code} | {rule.flags} | {rule.hint} |" for rule in INTEGRITY_RULES]
    return "\n".join(lines) + "\n"


def _plain(template: str) -> str:
    """A hint template as prose: its fields shown as placeholders."""
    return template.replace("{", "<").replace("}", ">")
