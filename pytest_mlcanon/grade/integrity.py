"""The integrity codes: one table shared by the static scan, the run-time guard, the assessment and
the renderers. ``INT0xx`` are found by reading the files (``scan``), ``INT1xx`` while the code runs
(``guard``, ``assess``). Any of them marks the item *flagged*; the teacher's config decides whether a
flagged item scores zero (the default) or keeps its points for review.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_mlcanon.rubric.model import Finding


@dataclass(frozen=True)
class Rule:
    code: str
    title: str
    hint: str


RULES: dict[str, Rule] = {rule.code: rule for rule in (
    Rule("INT001", "ends, signals or limits a process", "return a value or raise an exception; never exit the grader"),
    Rule("INT002", "patches the test machinery or another module's functions",
         "never assign to another module's attributes, register pytest hooks or touch sys.modules"),
    Rule("INT003", "imports the reference implementation of the item under test", "write the item yourself"),
    Rule("INT004", "reads the tests or inspects its caller's frames",
         "an implementation needs only its arguments: no test files, frames or gc"),
    Rule("INT005", "uses a forbidden library shortcut for this item", "implement it from the formula"),
    Rule("INT006", "touches the file system", "an implementation reads its arguments and returns values"),
    Rule("INT007", "starts a process or a thread", "compute in the calling thread"),
    Rule("INT008", "uses the network", "no network access is needed or allowed"),
    Rule("INT009", "runs code the scan cannot read (exec, eval, importlib, ctypes, code objects)",
         "write plain Python"),
    Rule("INT010", "passes the reference tests but fails the seeded re-check on fresh inputs",
         "compute the answer from the inputs; hard-coded answers only fit the public examples"),
    Rule("INT011", "is a verbatim copy of the reference implementation", "write the item yourself"),
    Rule("INT101", "wrote outside its folder (blocked)", "write nothing; return values"),
    Rule("INT102", "opened a test file or the reference (blocked)", "an implementation needs only its arguments"),
    Rule("INT103", "tried to use the network (blocked)", "no network access is needed or allowed"),
    Rule("INT104", "tried to start a process or a thread (blocked)", "compute in the calling thread"),
    Rule("INT105", "inspected the grader's frames or objects (blocked)", "an implementation needs only its arguments"),
    Rule("INT106", "tampered with the test machinery while running", "leave other modules' functions alone"),
    Rule("INT107", "forged or corrupted the result channel", "print nothing to file descriptors you did not open"),
    Rule("INT108", "ran dynamic or native code (blocked)", "write plain Python"),
    Rule("INT109", "tried to signal or limit another process (blocked)", "return a value or raise an exception"),
)}


def finding(code: str, path: str, line: int, detail: str) -> Finding:
    """An integrity finding: the rule's title, the specific detail, and the rule's hint."""
    rule = RULES[code]
    return Finding(code, path, line, f"{rule.title}: {detail}" if detail else rule.title, rule.hint)
