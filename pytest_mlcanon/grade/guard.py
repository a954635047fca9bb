"""The run-time guard of a grading child: an audit hook that blocks, and reports, what learner code
may not do, and a tamper check on the functions the tests and the harness rely on.

An audit hook (PEP 578) cannot be removed once added, and it sees the events under every library
call: ``open`` with its mode, ``socket.connect``, ``os.fork``, ``subprocess.Popen``, ``ctypes.dlopen``,
``sys._getframe``, ``gc.get_referrers``, ``exec``... An event is held against the learner when

* a frame of a learner file is anywhere on the stack, for what touches the world (writing files,
  reading the tests or the item's reference, the network, processes, signals, native code);
* a learner frame is the direct caller (past ``ctypes``, ``inspect`` and ``traceback`` wrappers),
  for introspection, dynamic code and tracing hooks, which libraries use legitimately.

A held event is reported on the channel (``violation`` frames, ``INT1xx`` codes) and blocked with a
``PermissionError``. Catching that error does not undo the report.

The tamper check compares, after each test's teardown, the identity of the comparison functions
(``torch.testing.assert_close``, ``numpy.testing.assert_allclose``...), pytest's reporting path and a
few builtins with a snapshot taken before the first test; each pytest plugin is checked as it is
registered, and the whole set again when the session ends.
Code in the same process could in principle defeat both; that is why the static scan flags the
primitives such an attack needs, and why the parent decides correctness by its own comparison.
"""

from __future__ import annotations

import functools
import inspect
import linecache
import operator
import os
import sys
import tokenize
import traceback
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pytest_mlcanon.grade.channel import ChannelWriter

ANY_FRAME: dict[str, str] = {
    "open": "INT101", "os.remove": "INT101", "os.rename": "INT101", "os.rmdir": "INT101", "os.mkdir": "INT101",
    "os.chmod": "INT101", "os.chown": "INT101", "os.link": "INT101", "os.symlink": "INT101", "os.truncate": "INT101",
    "os.utime": "INT101", "shutil.rmtree": "INT101", "shutil.copyfile": "INT101", "shutil.move": "INT101",
    "socket.__new__": "INT103", "socket.connect": "INT103", "socket.bind": "INT103", "socket.sendto": "INT103",
    "socket.sendmsg": "INT103", "socket.getaddrinfo": "INT103", "socket.gethostbyname": "INT103",
    "socket.gethostbyaddr": "INT103", "socket.getnameinfo": "INT103",
    "os.fork": "INT104", "os.forkpty": "INT104", "os.system": "INT104", "os.exec": "INT104",
    "os.posix_spawn": "INT104", "os.spawn": "INT104", "subprocess.Popen": "INT104", "os.startfile": "INT104",
    "_thread.start_new_thread": "INT104",
    "os.kill": "INT109", "os.killpg": "INT109", "signal.pthread_kill": "INT109", "resource.prlimit": "INT109",
}
DIRECT_CALLER: dict[str, str] = {
    "sys._getframe": "INT105", "sys._current_frames": "INT105", "gc.get_objects": "INT105",
    "gc.get_referrers": "INT105", "gc.get_referents": "INT105", "object.__getattr__": "INT105",
    "exec": "INT108", "compile": "INT108", "code.__new__": "INT108", "function.__new__": "INT108",
    "marshal.loads": "INT108", "marshal.load": "INT108", "pickle.find_class": "INT108",
    "sys.settrace": "INT106", "sys.setprofile": "INT106", "sys.addaudithook": "INT106",
    "object.__setattr__": "INT106", "object.__delattr__": "INT106",
}
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
#: Functions whose identity must not change while the tests run (dotted, resolved without importing).
WATCHED = (
    "torch.allclose", "torch.isclose", "torch.equal", "torch.isfinite", "torch.testing.assert_close",
    "torch.Tensor.allclose", "torch.Tensor.__eq__", "torch.Tensor.__bool__",
    "numpy.allclose", "numpy.isclose", "numpy.array_equal", "numpy.testing.assert_allclose",
    "numpy.testing.assert_array_equal", "numpy.testing.assert_equal", "numpy.testing.assert_array_almost_equal",
    "math.isclose", "builtins.open", "builtins.__import__", "builtins.isinstance", "builtins.len", "builtins.abs",
    "builtins.all", "builtins.any", "builtins.float", "builtins.bool", "builtins.AssertionError",
    "_pytest.runner.call_and_report", "_pytest.runner.call_runtest_hook", "_pytest.runner.runtestprotocol",
    "_pytest.runner.pytest_runtest_makereport", "_pytest.runner.CallInfo.from_call",
    "_pytest.reports.TestReport.from_item_and_call", "_pytest.reports.TestReport.__init__",
    "_pytest.python.pytest_pyfunc_call", "_pytest.python.Function.runtest", "_pytest.outcomes.fail",
    "_pytest.outcomes.skip", "pluggy._callers._multicall", "pluggy._manager.PluginManager._hookexec",
    "pytest_mlcanon.run.record.Record.pytest_runtest_logreport", "pytest_mlcanon.run.state.CanonRun.evidence",
    "pytest_mlcanon.grade.stream.StreamPlugin.pytest_runtest_logreport",
    "pytest_mlcanon.grade.channel.ChannelWriter.send", "os.write",
    # what turns an outcome into the frame the parent reads: rebinding one (by ``unittest.mock.patch.object``,
    # whose own frame makes the class's setattr) once turned every failed test's frame into a pass, unflagged
    "pytest_mlcanon.evidence.Outcome.to_json", "pytest_mlcanon.evidence.ItemEvidence.to_json",
    "pytest_mlcanon.run.record.Record.pytest_runtest_makereport", "pytest_mlcanon.run.record.Record.pytest_runtest_call",
    "pytest_mlcanon.run.state.CanonRun.state_of", "pytest_mlcanon.run.state.ItemState.evidence",
    "json.dumps", "json.encoder.JSONEncoder.encode", "json.encoder.JSONEncoder.iterencode",
)
#: Modules whose every global function, class and module is watched like ``WATCHED``: the helpers the
#: tests compare with (``assert_close``, ``iou_pair``...) and what they use (``np``), and the codec and
#: channel that frame each outcome for the parent (``json.encoder.c_make_encoder`` rebound rewrites every
#: frame); the test modules themselves are added once collected (``watch_tests``).
WATCHED_MODULES = ("pytest_mlcanon.testing", "pytest_mlcanon.evidence", "pytest_mlcanon.grade.channel",
                   "pytest_mlcanon.grade.stream", "json", "json.encoder")
TEST_PACKAGE = "canon_tests"
MAX_REPORTS = 50


#: The standard library's source readers: a stack trace a library formats (``torch.manual_seed`` does, on
#: its lazy CUDA path) reads the source of every frame, the test file's among them.
SOURCE_READERS = (linecache.__file__, tokenize.__file__)
#: The standard library's front ends to them, which read any file a caller names (``traceback``'s
#: ``FrameSummary(path, n).line``, ``inspect.getsource``, ``warnings.formatwarning``): their caller is
#: the one reading.
SOURCE_FRONTS = (*SOURCE_READERS, traceback.__file__, inspect.__file__, warnings.__file__)


def _for_a_stack_trace(opener: Any, learner: Any) -> bool:
    """Whether a read is the source readers' at the behest of a library other than the standard library's
    front ends to them (``torch``'s lazy CUDA path formats a stack trace: a false INT102 once zeroed an
    honest ``torch.manual_seed(0)``). A learner that calls the readers or a front end itself is the reader
    (red team: ``traceback.FrameSummary(test_file, 1).line`` read the tests unflagged)."""
    if opener.f_code.co_filename not in SOURCE_READERS:
        return False
    frame = opener
    while frame is not None and frame.f_code.co_filename in SOURCE_FRONTS:
        frame = frame.f_back
    return frame is not None and frame is not learner


def _for_a_signature(reader: Any) -> bool:
    """Whether ``inspect.signature`` reads a function's ``__code__`` (its parameters): a learner asking
    whether a statistic takes ``axis`` reads no frame and tampers with nothing (blind trial: INT105 zeroed
    an honest bootstrap)."""
    return reader.f_code.co_filename == inspect.__file__ and reader.f_code.co_name.startswith(
        ("_signature", "signature"))


def _trampolines() -> tuple[str, ...]:
    """Library files that call audited functions on their caller's behalf."""
    import ctypes

    return (os.path.dirname(ctypes.__file__) + os.sep, inspect.__file__, traceback.__file__)


class Guard:
    """Installs the audit hook and keeps the tamper snapshot for one child."""

    def __init__(self, channel: ChannelWriter, learner_dir: str, scratch: str, job_dir: str,
                 protected_dirs: tuple[str, ...], protected_files: tuple[str, ...]) -> None:
        self.channel = channel
        self.learner_prefix = os.path.realpath(learner_dir) + os.sep
        self.scratch_prefix = os.path.realpath(scratch) + os.sep
        self.job_prefix = os.path.realpath(job_dir) + os.sep
        self.protected_dirs = tuple(os.path.realpath(d) + os.sep for d in protected_dirs)
        self.protected_files = frozenset(os.path.realpath(f) for f in protected_files)
        self._sent: set[tuple[str, str, str, int]] = set()
        self._watched: dict[str, Any] = {}
        self._reported_tamper: set[str] = set()
        self._plugins_seen: list[Any] = []
        self._globals: list[_Namespace] = []

    # -- reporting -------------------------------------------------------------------------------------
    def report(self, code: str, detail: str, filename: str = "", line: int = 0) -> None:
        path = filename.removeprefix(self.job_prefix)
        key = (code, detail, path, line)
        if key in self._sent or len(self._sent) >= MAX_REPORTS:
            return
        self._sent.add(key)
        self.channel.send("violation", code=code, detail=detail, path=path, line=line)

    # -- the audit hook ---------------------------------------------------------------------------------
    def install(self) -> None:
        sys.addaudithook(self._make_hook())

    def _make_hook(self) -> Callable[[str, tuple[Any, ...]], None]:
        busy = [False]
        getframe = sys._getframe
        learner, trampolines = self.learner_prefix, _trampolines()
        judge, report = self._judge, self.report

        def learner_frame(event: str) -> Any:
            frame: Any = getframe(2)
            if event in DIRECT_CALLER or event.startswith("ctypes."):
                while frame is not None and frame.f_code.co_filename.startswith(trampolines):
                    frame = frame.f_back
                return frame if frame is not None and frame.f_code.co_filename.startswith(learner) else None
            while frame is not None:
                if frame.f_code.co_filename.startswith(learner):
                    return frame
                frame = frame.f_back
            return None

        def hook(event: str, args: tuple[Any, ...]) -> None:
            code = ANY_FRAME.get(event) or DIRECT_CALLER.get(event) or ("INT108" if event.startswith("ctypes.")
                                                                         else None)
            if code is None or busy[0]:
                return
            busy[0] = True
            blocked = ""
            try:
                frame = learner_frame(event)
                if frame is not None and event == "open" and _for_a_stack_trace(getframe(1), frame):
                    frame = None
                if frame is not None and event == "object.__getattr__" and _for_a_signature(getframe(1)):
                    frame = None
                if frame is not None:
                    verdict = judge(event, code, args)
                    if verdict is not None:
                        code, blocked = verdict
                        report(code, blocked, frame.f_code.co_filename, frame.f_lineno)
            finally:
                busy[0] = False
            if blocked:
                raise PermissionError(f"mlcanon grade: not allowed while grading: {blocked}")

        return hook

    def _judge(self, event: str, code: str, args: tuple[Any, ...]) -> tuple[str, str] | None:
        """(code, detail) when the event must be blocked, None when it is harmless."""
        if event == "open":
            return self._judge_open(args)
        if code == "INT101":
            paths = [a for a in args[:2] if isinstance(a, (str, bytes, os.PathLike))]
            outside = [p for p in map(self._real, paths) if not p.startswith(self.scratch_prefix)]
            return (code, f"{event} {outside[0]}") if outside else None
        if event in ("object.__setattr__", "object.__delattr__", "object.__getattr__"):
            return self._judge_attribute(event, code, args)
        if event == "resource.prlimit" and args and args[0] in (0, os.getpid()):
            return None  # its own limits: it can only lower them
        return code, event

    def _judge_open(self, args: tuple[Any, ...]) -> tuple[str, str] | None:
        path, mode, flags = (list(args) + [None, None, None])[:3]
        if not isinstance(path, (str, bytes, os.PathLike)):
            return None
        real = self._real(path)
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & WRITE_FLAGS)
        if writing:
            if real.startswith(self.scratch_prefix) or real == os.devnull:
                return None
            return "INT101", f"opened {real} for writing"
        if real in self.protected_files or real.startswith(self.protected_dirs):
            return "INT102", f"opened {real}"
        return None

    @staticmethod
    def _judge_attribute(event: str, code: str, args: tuple[Any, ...]) -> tuple[str, str] | None:
        target, name = (args + (None, None))[:2]
        owner = getattr(target, "__module__", "") or ""
        if name != "__code__" and (not isinstance(owner, str) or owner.startswith(("canon_refs.", "mlbook."))):
            return None  # the learner's own classes and functions
        return code, f"{event} {type(target).__name__}.{name}"

    @staticmethod
    def _real(path: Any) -> str:
        try:
            return os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return str(path)

    # -- the tamper check --------------------------------------------------------------------------------
    def snapshot(self) -> None:
        """Remember the watched functions; call before any learner code runs."""
        self._watched = {name: resolve(name) for name in WATCHED}
        self._globals = []
        for name in WATCHED_MODULES:
            self._watch_globals(sys.modules.get(name))

    def watch_tests(self) -> None:
        """Remember the globals of the test modules and their helpers, once collected: a learner that
        rebinds one (the ``assert_close`` a test module imported) while the tests run is tampering."""
        seen = {watched.owner for watched in self._globals}
        for name, module in list(sys.modules.items()):
            if (name == TEST_PACKAGE or name.startswith(TEST_PACKAGE + ".")) and name not in seen:
                self._watch_globals(module)

    def _watch_globals(self, module: Any) -> None:
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            return
        name = str(getattr(module, "__name__", "?"))
        pairs = [(attr, value) for attr, value in list(namespace.items())
                 if not attr.startswith("__") and (callable(value) or inspect.ismodule(value))]
        self._globals.append(_Namespace(name, namespace, tuple(a for a, _ in pairs), tuple(v for _, v in pairs)))

    def check(self, plugins: Iterable[Any] = ()) -> None:
        """Report (once each) every watched function that changed, and every pytest plugin of
        ``plugins`` defined in a learner file (``plugin_registered`` sees each as it is registered)."""
        # identity by ``is``, not ``id()``: every ``id()`` call is an audit event, and this runs after each test
        for name, original in self._watched.items():
            if resolve(name) is not original and name not in self._reported_tamper:
                self._reported_tamper.add(name)
                self.report("INT106", f"`{name}` was replaced")
        for watched in self._globals:
            for attr in watched.replaced():
                if f"{watched.owner}.{attr}" not in self._reported_tamper:
                    self._reported_tamper.add(f"{watched.owner}.{attr}")
                    self.report("INT106", f"`{watched.owner}.{attr}` was replaced")
        for plugin in plugins:
            self.plugin_registered(plugin)

    def plugin_registered(self, plugin: Any) -> None:
        """Report ``plugin`` (once) when it is defined in a learner file."""
        if any(plugin is seen for seen in self._plugins_seen):
            return
        self._plugins_seen.append(plugin)
        module = plugin if inspect.ismodule(plugin) else sys.modules.get(type(plugin).__module__)
        filename = os.path.realpath(getattr(module, "__file__", None) or "")
        if filename.startswith(self.learner_prefix):
            self.report("INT106", f"registered a pytest plugin from {filename.removeprefix(self.job_prefix)}")


@dataclass(frozen=True)
class _Namespace:
    """The watched globals of one module: their names and the objects they were bound to."""

    owner: str
    namespace: dict[str, Any]
    names: tuple[str, ...]
    values: tuple[Any, ...]

    def replaced(self) -> list[str]:
        """The names now bound to another object. Compared by identity, in C (``map`` with ``is_``):
        this runs after every test over ~2,000 names."""
        if all(map(operator.is_, map(self.namespace.get, self.names), self.values)):
            return []
        return [name for name, value in zip(self.names, self.values, strict=True) if self.namespace.get(name) is not value]


def resolve(dotted: str) -> Any:
    """The object at ``dotted`` from already imported modules (never imports), or None. A class
    attribute is read from the class dictionaries (no descriptor call, so its identity is stable)."""
    for module, attrs in _lookups(dotted):
        value: Any = sys.modules.get(module)
        if value is None:
            continue
        for attr in attrs:
            if isinstance(value, type):
                value = next((k.__dict__[attr] for k in value.__mro__ if attr in k.__dict__), None)
            else:
                value = getattr(value, attr, None)
            if value is None:
                return None
        return value
    return None


@functools.lru_cache(maxsize=256)
def _lookups(dotted: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``dotted`` as (module name, attributes) pairs, the longest module name first (each watched name
    is resolved after every test: split once)."""
    parts = dotted.split(".")
    return tuple((".".join(parts[:cut]), tuple(parts[cut:])) for cut in range(len(parts), 0, -1))
