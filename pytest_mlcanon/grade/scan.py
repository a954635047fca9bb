"""The static integrity scan: what a submission's files do that an implementation has no reason to do.

It reads (never runs) the item's own files and every learner file they reach through
``canon_refs.*``/``mlbook.*`` imports, with ``ast``, through the same ``Source`` and import aliases as
the rubric: ``from sys import exit as leave`` is still ``sys.exit``. Each hit is an integrity finding
(``integrity.RULES``). The scan is a tripwire for the primitives an attack needs (exiting, patching,
peeking, spawning, dynamic code); the run-time ``guard`` blocks the same things while the code runs,
and the parent's seeded re-check is what a forged pass cannot get past.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

from pytest_mlcanon import catalog
from pytest_mlcanon.grade import answers
from pytest_mlcanon.grade.integrity import finding
from pytest_mlcanon.redirect import ALIAS_PACKAGE, REF_PACKAGE, reference_dir
from pytest_mlcanon.rubric import api
from pytest_mlcanon.rubric.model import Finding
from pytest_mlcanon.rubric.source import Source, SourceError, load, resolve, walk

EXIT_CALLS = frozenset({"sys.exit", "os._exit", "os.abort", "os.kill", "os.killpg", "_thread.interrupt_main",
                        "exit", "quit", "os.pidfd_open", "os.setsid", "os.setpgid", "os.setpgrp",
                        "resource.prlimit", "resource.setrlimit"})
EXIT_EXCEPTIONS = frozenset({"SystemExit", "KeyboardInterrupt", "GeneratorExit"})
PATCH_CALLS = frozenset({"sys.settrace", "sys.setprofile", "sys.addaudithook", "threading.settrace",
                         "threading.setprofile", "importlib.reload"})
INTROSPECTION_CALLS = frozenset({
    "sys._getframe", "sys._current_frames", "inspect.currentframe", "inspect.stack", "inspect.getouterframes",
    "inspect.getframeinfo", "inspect.trace", "inspect.getsource", "inspect.getsourcelines", "inspect.getsourcefile",
    "inspect.getfile", "inspect.getmodule", "traceback.extract_stack", "traceback.walk_stack",
    "traceback.format_stack", "traceback.print_stack",
})
# The garbage collector's object graph reaches the test's frames; pausing or running it (gc.disable,
# gc.collect, gc.freeze) is ordinary performance work and is not flagged.
GC_GRAPH = ("gc.get_objects", "gc.get_referrers", "gc.get_referents")
FRAME_ATTRS = frozenset({"f_back", "f_locals", "f_globals", "f_builtins", "f_code", "tb_frame", "gi_frame", "cr_frame",
                         "ag_frame"})
FILE_CALLS = frozenset({
    "open", "io.open", "codecs.open", "os.open", "os.fdopen", "os.write", "os.remove", "os.unlink", "os.rename",
    "os.renames", "os.replace", "os.mkdir", "os.makedirs", "os.rmdir", "os.removedirs", "os.chmod", "os.chown",
    "os.link", "os.symlink", "os.truncate", "os.listdir", "os.scandir", "os.walk", "os.mkfifo", "os.mknod", "os.chdir",
    "os.memfd_create", "os.sendfile", "torch.from_file", "numpy.fromfile",
    "numpy.save", "numpy.savez", "numpy.savez_compressed", "numpy.savetxt", "numpy.load", "numpy.loadtxt",
    "numpy.genfromtxt", "numpy.memmap", "torch.save", "torch.load",
})
FILE_METHODS = frozenset({"read_text", "read_bytes", "write_text", "write_bytes", "tofile", "touch", "symlink_to",
                          "hardlink_to", "iterdir", "rglob", "from_file"})
PROCESS_CALLS = frozenset({"os.fork", "os.forkpty", "os.system", "os.popen", "os.posix_spawn", "os.posix_spawnp",
                           "os.startfile", "_thread.start_new_thread", "_thread.start_new"})
PROCESS_PREFIXES = ("os.exec", "os.spawn")
DYNAMIC_CALLS = frozenset({"exec", "eval", "compile", "__import__", "breakpoint", "types.FunctionType",
                           "types.CodeType", "types.ModuleType"})
DYNAMIC_ATTRS = frozenset({"__subclasses__", "__globals__", "__code__", "__closure__", "__builtins__", "__loader__"})
# A value that answers each comparison its own way makes a failing test pass (a tensor whose
# ``__torch_function__`` says every ``isclose`` is true, an array whose ufuncs agree, a float whose
# ``__eq__`` is always true); no item needs one. The re-check refuses such answers, but the tests the
# re-check does not reach (an edge case, a function it cannot verify) would take them.
VALUE_BASES = frozenset({"torch.Tensor", "numpy.ndarray", "numpy.generic", "numpy.number", "numpy.floating",
                         "numpy.integer", "numpy.float64", "numpy.float32", "numpy.int64", "numpy.bool_"})
BUILTIN_VALUES = frozenset({"int", "float", "complex", "str", "bytes", "list", "tuple", "dict", "set", "frozenset"})
VALUE_PROTOCOLS = frozenset({"__torch_function__", "__torch_dispatch__", "__array_ufunc__", "__array_function__",
                             "__array_wrap__", "__array_finalize__", "__array_priority__"})
COMPARISON_DUNDERS = frozenset({"__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__bool__", "__abs__",
                                "__sub__", "__rsub__", "__float__", "__int__", "__index__", "__getattribute__",
                                "__instancecheck__"})  # not __len__ or __contains__: a buffer(list) may have them
SUBCLASS_METHODS = frozenset({"as_subclass", "_make_subclass", "_make_wrapper_subclass"})

#: Masked arrays: NumPy's comparisons skip their masked entries, so a fully masked answer passes any
#: ``np.testing`` check (red team: a singular least-squares fit returned one); no item needs one.
MASKED = "numpy.ma"

MODULE_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("INT001", ("signal", "resource")),
    ("INT002", ("pytest", "_pytest", "pluggy", "unittest", "mock", "pytest_mlcanon", "builtins", "__builtin__",
                "sitecustomize", "usercustomize", "atexit", MASKED)),
    ("INT004", ("canon_tests", "conftest", *GC_GRAPH)),
    ("INT006", ("shutil", "tempfile", "glob", "pathlib", "fileinput", "zipfile", "tarfile", "sqlite3", "dbm",
                "shelve", "mmap")),
    ("INT007", ("subprocess", "multiprocessing", "concurrent.futures", "threading", "_thread", "pty",
                "_posixsubprocess", "posix", "_posixshmem")),
    ("INT008", ("socket", "ssl", "urllib", "http", "requests", "httpx", "aiohttp", "ftplib", "smtplib", "poplib",
                "imaplib", "telnetlib", "xmlrpc", "socketserver", "websocket", "websockets")),
    ("INT009", ("importlib", "ctypes", "cffi", "marshal", "pickle", "dill", "cloudpickle", "code", "codeop", "runpy",
                "zipimport", "imp", "pydoc")),
)
_TEST_FILE = re.compile(r"(^|[/\\])(test_\w+|conftest)\.py\b")


def scan(item: catalog.Item, impl_dir: Path, display_root: Path) -> list[Finding]:
    """Every integrity finding in the item's files and the learner files they import."""
    found: list[Finding] = []
    for path in reachable_files(item, impl_dir):
        try:
            source = load(path, _display(path, display_root))
        except SourceError:
            continue  # a syntax error is a broken submission, not an integrity problem
        own = path.relative_to(impl_dir).with_suffix("").as_posix()
        found += _Scanner(source, item, own).run()
        found += _copied(source, item, path.relative_to(impl_dir))
    return sorted(set(found), key=lambda f: (f.path, f.line, f.code))


def reachable_files(item: catalog.Item, impl_dir: Path) -> list[Path]:
    """The learner's files of the item, then those they reach by canon imports, breadth first."""
    queue = [m for m in item.modules if (impl_dir / f"{m}.py").is_file()]
    seen: set[str] = set()
    files: list[Path] = []
    while queue:
        module = queue.pop(0)
        if module in seen:
            continue
        seen.add(module)
        path = impl_dir / f"{module}.py"
        files.append(path)
        try:
            tree = load(path).tree
        except SourceError:
            continue
        queue += [m for m in canon_imports(tree, module) if (impl_dir / f"{m}.py").is_file()]
    return files


def canon_imports(tree: ast.Module, module: str) -> list[str]:
    """``<area>/<module>`` names a file imports through ``canon_refs``, ``mlbook`` or a relative import
    (``from . import helper``, ``from ..posttrain import _machinery``, ``from ..transformer.gpt import GPT``)."""
    area = module.split("/")[0]
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [m for alias in node.names if (m := _canon_module(alias.name))]
        elif isinstance(node, ast.ImportFrom):
            if node.level in (1, 2):
                # the file is canon_refs.<area>.<module>: level 1 is canon_refs.<area>, level 2 canon_refs
                package = [REF_PACKAGE, area] if node.level == 1 else [REF_PACKAGE]
                base = ".".join([*package, *(node.module.split(".") if node.module else [])])
                direct = _canon_module(base)
                found += [direct] if direct else [m for alias in node.names
                                                  if (m := _canon_module(f"{base}.{alias.name}"))]
            elif node.level == 0 and node.module:
                direct = _canon_module(node.module)
                found += [direct] if direct else [m for alias in node.names
                                                  if (m := _canon_module(f"{node.module}.{alias.name}"))]
    return found


def _canon_module(dotted: str) -> str | None:
    parts = dotted.split(".")
    if parts[0] in (REF_PACKAGE, ALIAS_PACKAGE) and len(parts) >= 3 and all(p.isidentifier() for p in parts[1:3]):
        return f"{parts[1]}/{parts[2]}"
    return None


def _display(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def _matches(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


class _Scanner:
    """One pass over one file; collects findings as (code, line, detail)."""

    def __init__(self, source: Source, item: catalog.Item, module: str) -> None:
        self.source = source
        self.item = item
        self.module = module.replace("/", ".")  # the file's own canon module: importing it is the reference
        self.own = {m.replace("/", ".") for m in answers.answer_modules(item)}  # its own and their twins
        self.twins = self.own - {m.replace("/", ".") for m in item.modules}
        self.found: list[Finding] = []

    def add(self, code: str, node: ast.AST, detail: str) -> None:
        self.found.append(finding(code, self.source.display, getattr(node, "lineno", 0), detail))

    def run(self) -> list[Finding]:
        docstrings = set(_docstring_nodes(self.source.tree))
        for node in walk(self.source.tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                self.imports(node)
            elif isinstance(node, ast.Call):
                self.call(node)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                self.attribute(node)
            elif isinstance(node, ast.Name) and node.id in ("__builtins__", "__loader__"):
                self.add("INT002", node, f"`{node.id}`")
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                self.assignment(node)
            elif isinstance(node, ast.Raise) and node.exc is not None:
                name = _raised_name(node.exc)
                if name in EXIT_EXCEPTIONS:
                    self.add("INT001", node, f"`raise {name}`")
            elif isinstance(node, ast.ClassDef):
                self.value_class(node)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("pytest_"):
                self.add("INT002", node, f"defines the pytest hook `{node.name}`")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node not in docstrings:
                self.string(node)
        self.found += self.forbidden()
        return self.found

    def imports(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif node.level == 0 and node.module:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            return
        for name in names:
            if self._is_own_reference(name):
                self.add("INT003", node, f"`import {name}`")
                return
        for code, prefixes in MODULE_RULES:
            hit = next((n for n in names if _matches(n, prefixes)), None)
            if hit is not None:
                self.add(code, node, f"imports `{hit}`")

    def _is_own_reference(self, dotted: str) -> bool:
        parts = dotted.split(".")
        return parts[0] in (REF_PACKAGE, ALIAS_PACKAGE) and ".".join(parts[1:3]) in {self.module, *self.twins}

    def value_class(self, node: ast.ClassDef) -> None:
        """INT002 for a class whose values can answer a test's comparisons their own way."""
        bases = {self._name(base) or "" for base in node.bases}
        members = {name for stmt in node.body for name in _defined_names(stmt)}
        protocol = sorted(members & VALUE_PROTOCOLS)
        if bases & VALUE_BASES or protocol:
            what = sorted(bases & VALUE_BASES) or protocol
            self.add("INT002", node, f"defines `{node.name}`, a value that can answer comparisons its own way "
                                     f"(`{what[0]}`)")
        elif bases & BUILTIN_VALUES and members & COMPARISON_DUNDERS:
            self.add("INT002", node, f"defines `{node.name}`, a `{sorted(bases & BUILTIN_VALUES)[0]}` with its own "
                                     f"`{sorted(members & COMPARISON_DUNDERS)[0]}`")
        elif constant := next((name for stmt in node.body for name in _constant_answers(stmt)), None):
            self.add("INT002", node, f"defines `{node.name}`, whose `{constant}` gives the same answer whatever "
                                     "it is compared with")

    def call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Attribute) and node.func.attr in SUBCLASS_METHODS:
            self.add("INT002", node, f"calls `.{node.func.attr}()` (a tensor of its own type)")
            return
        name = self._name(node.func)
        if name == "type" and len(node.args) == 3:
            self.add("INT009", node, "builds a class at run time (`type(name, bases, namespace)`)")
            return
        if name is None:
            if isinstance(node.func, ast.Attribute) and node.func.attr in FILE_METHODS:
                self.add("INT006", node, f"calls `.{node.func.attr}()`")
            return
        if name in EXIT_CALLS or name.startswith("signal."):
            self.add("INT001", node, f"calls `{name}`")
        elif name in PATCH_CALLS:
            self.add("INT002", node, f"calls `{name}`")
        elif name in ("setattr", "delattr") and node.args and self._mutates_import(node.args[0]):
            self.add("INT002", node, f"`{name}` on `{ast.unparse(node.args[0])}`")
        elif name in INTROSPECTION_CALLS:
            self.add("INT004", node, f"calls `{name}`")
        elif name in FILE_CALLS:
            self.add("INT006", node, f"calls `{name}`")
        elif name in PROCESS_CALLS or name.startswith(PROCESS_PREFIXES):
            self.add("INT007", node, f"calls `{name}`")
        elif name in DYNAMIC_CALLS:
            self.add("INT009", node, f"calls `{name}`")
        elif isinstance(node.func, ast.Attribute) and node.func.attr in FILE_METHODS:
            self.add("INT006", node, f"calls `.{node.func.attr}()`")

    def _name(self, func: ast.expr) -> str | None:
        """The dotted origin of a called name through the imports; builtins by their own name; the
        ``posix`` module (what ``os`` re-exports) by its ``os`` name."""
        if isinstance(func, ast.Name) and func.id not in self.source.aliases:
            return func.id
        name = resolve(func, self.source.aliases)
        return f"os.{name[6:]}" if name is not None and name.startswith("posix.") else name

    def _touches_import(self, node: ast.expr) -> bool:
        return any(isinstance(n, ast.Name) and n.id in self.source.aliases for n in ast.walk(node))

    def _mutates_import(self, node: ast.expr) -> bool:
        """True when the object being changed is reached from an import: ``torch.allclose``,
        ``np.testing.__dict__[k]``, ``sys.modules[k].f``, ``vars(torch)[k]``, ``getattr(torch, n).f``."""
        while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
            if isinstance(node, ast.Call):
                return any(self._touches_import(arg) for arg in node.args)
            node = node.value
        return isinstance(node, ast.Name) and node.id in self.source.aliases

    def attribute(self, node: ast.Attribute) -> None:
        if node.attr in FRAME_ATTRS:
            self.add("INT004", node, f"reads `.{node.attr}`")
        elif node.attr in DYNAMIC_ATTRS:
            self.add("INT009", node, f"reads `.{node.attr}`")
        else:
            full = resolve(node, self.source.aliases)
            if full == "sys.modules":
                self.add("INT002", node, "uses `sys.modules`")
            elif full == MASKED:
                self.add("INT002", node, f"uses `{MASKED}` (masked entries are skipped by NumPy's comparisons)")
            elif full in GC_GRAPH:
                self.add("INT004", node, f"uses `{full}`")
            elif full and self._is_own_reference(full):
                self.add("INT003", node, f"uses `{full}`")

    def assignment(self, node: ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete) -> None:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.Delete):
            targets = node.targets
        else:
            targets = [node.target]
        for target in targets:
            for sub in _flatten(target):
                if isinstance(sub, (ast.Attribute, ast.Subscript)) and self._mutates_import(sub):
                    self.add("INT002", node, f"assigns `{ast.unparse(sub)}`")
                    return

    def string(self, node: ast.Constant) -> None:
        text = str(node.value)
        if "canon_tests" in text or _TEST_FILE.search(text):
            self.add("INT004", node, f"names a test file ({text[:60]!r})")
        elif any(m in text or m.replace(".", "/") in text for m in self.own) and REF_PACKAGE in text:
            self.add("INT003", node, f"names the reference ({text[:60]!r})")

    def forbidden(self) -> list[Finding]:
        found = [finding("INT005", f.path, f.line, f.message.split(" is a forbidden", 1)[0])
                 for f in api.static_findings(self.source, self.item) if f.code == "API005"]
        packages = {banned for banned in self.item.forbidden if "." not in banned}
        lines = {f.line for f in found}
        modules = _imported_names(self.source.tree)
        for node in walk(self.source.tree):
            reached, line = _package_attribute(node, packages, modules), getattr(node, "lineno", 0)
            if reached and line not in lines:
                lines.add(line)
                found.append(finding("INT005", self.source.display, line,
                                     f"`{reached}` (a forbidden package reached as another module's attribute)"))
        return found


def _package_attribute(node: ast.AST, packages: set[str], modules: set[str]) -> str:
    """``helper.torch`` (``helper`` imported), ``getattr(helper, "torch")`` or ``vars(helper)["torch"]``: a
    package the item forbids whole, reached through a module that imported it (another item's
    reference), which no import names; the run-time detector sees it only in the calls the re-check
    makes. Empty if not. An attribute of anything but an imported name (``self.transformers``, a
    learner's own list of blocks) is not a package."""
    if (isinstance(node, ast.Attribute) and node.attr in packages and isinstance(node.ctx, ast.Load)
            and isinstance(node.value, ast.Name) and node.value.id in modules):
        return ast.unparse(node)[:60]
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in packages):
        return ast.unparse(node)[:60]
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value in packages \
            and _namespace_of(node.value):
        return ast.unparse(node)[:60]
    return ""


def _namespace_of(node: ast.expr) -> bool:
    """``vars(x)`` or ``x.__dict__``: a module's namespace, read as a dict."""
    if isinstance(node, ast.Attribute):
        return node.attr == "__dict__"
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "vars"


def _imported_names(tree: ast.AST) -> set[str]:
    """The names a file's imports bind (``import a.b`` binds ``a``; ``from x import y as z`` binds ``z``)."""
    names: set[str] = set()
    for node in walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.asname or alias.name.split(".", 1)[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def _defined_names(stmt: ast.stmt) -> Iterator[str]:
    """The names a class body statement binds (``def f``, ``f = ...``, ``f: T = ...``)."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        yield stmt.name
    elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
        for target in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
            yield from (t.id for t in _flatten(target) if isinstance(t, ast.Name))


#: What a test's check asks of a value: equality, order and truth.
ANSWERS = frozenset({"__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__bool__"})


def _constant_answers(stmt: ast.stmt) -> Iterator[str]:
    """The comparison or truth dunders a class body statement defines to return a constant whatever
    the other value is (``def __eq__(self, other): return True``, ``__eq__ = lambda s, o: True``): a
    value that passes every ``==`` a test asks of it. A field-wise ``__eq__`` is an ordinary value."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name in ANSWERS:
        returns = [n for n in ast.walk(stmt) if isinstance(n, ast.Return)]
        if returns and all(isinstance(r.value, ast.Constant) for r in returns):
            yield stmt.name
    elif isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Lambda) \
            and isinstance(stmt.value.body, ast.Constant):
        yield from (name for target in stmt.targets for t in _flatten(target)
                    if isinstance(t, ast.Name) and (name := t.id) in ANSWERS)


def _flatten(target: ast.expr) -> Iterator[ast.expr]:
    if isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _flatten(element)
    elif isinstance(target, ast.Starred):
        yield from _flatten(target.value)
    else:
        yield target


def _raised_name(exc: ast.expr) -> str:
    node = exc.func if isinstance(exc, ast.Call) else exc
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _docstring_nodes(tree: ast.Module) -> Iterator[ast.Constant]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value,
                                                                                                     str):
                yield first.value


def _copied(source: Source, item: catalog.Item, relative: Path) -> list[Finding]:
    """INT011: the file is the reference with only comments and docstrings changed."""
    module = relative.with_suffix("").as_posix()
    if module not in item.modules:
        return []
    reference = reference_dir() / relative
    if not reference.is_file() or reference.resolve() == source.path.resolve():
        return []
    theirs = _reference_skeleton(reference.read_bytes())
    if theirs is not None and _skeleton(source.tree) == theirs:
        return [finding("INT011", source.display, 1, f"same code as {REF_PACKAGE}/{relative.as_posix()}")]
    return []


@functools.lru_cache(maxsize=64)
def _reference_skeleton(data: bytes) -> str | None:
    """The skeleton of a reference module (by content: computed once per batch, not per student)."""
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError):
        return None
    return _skeleton(tree)


def _skeleton(tree: ast.Module) -> str:
    """The module's AST without docstrings, as text (comments are not in the AST)."""
    clone = ast.parse(ast.unparse(tree))
    for node in ast.walk(clone):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value,
                                                                                                     str):
                node.body = node.body[1:] or [ast.Pass()]
    return ast.dump(clone, annotate_fields=False)
