"""The result channel from a grading child to the parent: length-prefixed JSON frames on a pipe.

The child writes frames ``{"kind": ..., "seq": n, ...}``; the parent reads them with hard caps on the
size of one frame, on everything a job may send, and on how deeply a frame nests, and checks each
frame against the protocol as it arrives (``Protocol``): numbered from 0 without a gap, in the order
a job sends them, each case and each test answered once. The first frame that breaks a rule ends
the channel: the parent kills the job (``runner``), and the assessment flags it (``INT107``).

The channel is *not* trusted: learner code runs in the same process as the writer and can find the
pipe. Nothing the parent decides rests on a frame's claim alone (see ``assess``): a frame is
evidence to check, never a verdict to believe. The values inside re-check frames are encoded by
``values``.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any

HEADER = struct.Struct("!I")
MAX_FRAME = 8 * 1024 * 1024
MAX_TOTAL = 64 * 1024 * 1024
#: How deeply a frame's JSON may nest: a re-check answer is at most ``values.MAX_DEPTH`` values deep,
#: two JSON levels each, inside the frame's own two.
MAX_JSON_DEPTH = 40
#: Frames a job may send that end it (nothing but EOF may follow).
TERMINAL = frozenset({"harness-error", "limit", "done"})


class ChannelWriter:
    """Writes numbered frames to the pipe's write end; a closed pipe only sets ``broken`` (the parent
    is gone)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.broken = False
        self.seq = 0

    def send(self, kind: str, **payload: Any) -> None:
        body = json.dumps({"kind": kind, "seq": self.seq, **payload}, separators=(",", ":"),
                          default=str).encode("utf-8")
        if len(body) > MAX_FRAME:
            body = json.dumps({"kind": "oversize", "seq": self.seq, "of": kind, "size": len(body)}).encode("utf-8")
        self.seq += 1
        data = memoryview(HEADER.pack(len(body)) + body)
        while data and not self.broken:
            try:
                written = os.write(self.fd, data)
            except InterruptedError:
                continue
            except OSError:
                self.broken = True
                return
            data = data[written:]


class FrameReader:
    """Parses frames out of whatever the pipe delivers, enforcing the size and depth caps."""

    def __init__(self, fd: int, max_frame: int = MAX_FRAME, max_total: int = MAX_TOTAL) -> None:
        self.fd = fd
        self.max_frame = max_frame
        self.max_total = max_total
        self.total = 0
        self.eof = False
        self.error = ""
        self._buffer = bytearray()

    def read(self) -> list[dict[str, Any]]:
        """Read what is available (call when the fd is readable) and return the complete frames.

        After a protocol error the reader keeps draining the pipe (so the child never blocks on a
        full pipe) but returns no more frames; ``error`` says what went wrong.
        """
        try:
            chunk = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return []
        except OSError as exc:
            self.eof = True
            self.error = self.error or f"the result pipe failed: {exc.strerror}"
            return []
        if not chunk:
            self.eof = True
            if self._buffer and not self.error:
                self.error = f"the result channel ended inside a frame ({len(self._buffer)} stray bytes)"
            return []
        self.total += len(chunk)
        if self.error:
            return []
        if self.total > self.max_total:
            self.error = f"the child sent more than {self.max_total // (1 << 20)} MB of results"
            return []
        self._buffer += chunk
        frames: list[dict[str, Any]] = []
        while len(self._buffer) >= HEADER.size:
            (size,) = HEADER.unpack_from(self._buffer)
            if size > self.max_frame:
                self.error = f"a result frame of {size} bytes exceeds the {self.max_frame} byte cap"
                return frames
            if len(self._buffer) < HEADER.size + size:
                break
            body = bytes(self._buffer[HEADER.size:HEADER.size + size])
            del self._buffer[:HEADER.size + size]
            frame, self.error = parse(body)
            if frame is None:
                return frames
            frames.append(frame)
        return frames


def parse(body: bytes) -> tuple[dict[str, Any] | None, str]:
    """One frame from its bytes, or (None, why not). Never raises."""
    try:
        frame = json.loads(body.decode("utf-8"))
    except RecursionError:
        return None, f"a result frame nests deeper than {MAX_JSON_DEPTH} levels"
    except (UnicodeDecodeError, ValueError, MemoryError):
        return None, "a result frame is not valid JSON"
    if not isinstance(frame, dict) or not isinstance(frame.get("kind"), str):
        return None, "a result frame has no kind"
    if depth(frame) > MAX_JSON_DEPTH:
        return None, f"a result frame nests deeper than {MAX_JSON_DEPTH} levels"
    return frame, ""


def depth(value: Any) -> int:
    """How deeply ``value`` nests (a scalar: 0), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            items: Any = item.values()
        elif isinstance(item, list):
            items = item
        else:
            continue
        deepest = max(deepest, level + 1)
        if deepest > MAX_JSON_DEPTH:
            return deepest
        stack.extend((child, level + 1) for child in items)
    return deepest


class Protocol:
    """The order a job's frames must come in, checked frame by frame; ``error`` names the first
    frame out of place ('' while all is well). The order: ``hello``; then, at most once each and in
    this order, the re-check (``phase recheck``, then per case ``start`` and its ``recheck`` answer,
    indices 0, 1, 2...) and ``collected``; then the tests, each ``start``-ed once and answered by
    ``outcome`` frames of that test only; the items' ``evidence``; ``done``. ``violation`` and
    ``oversize`` (a frame too large to send) may come at any time after ``hello``; ``harness-error``
    and ``limit`` end the job like ``done``."""

    def __init__(self) -> None:
        self.error = ""
        self.seq = 0
        self.stage = "start"  # start, ready, recheck, collected, tests, evidence, ended
        self.case = 0
        self.current = ""
        self.started: set[str] = set()

    def feed(self, frame: dict[str, Any]) -> bool:
        """Check one frame; False (and ``error`` set) when it breaks the protocol."""
        if self.error:
            return False
        self.error = self._check(frame)
        return not self.error

    def _check(self, frame: dict[str, Any]) -> str:  # noqa: PLR0911 - one rule per line reads best
        kind, seq = frame["kind"], frame.get("seq")
        if seq != self.seq or isinstance(seq, bool):
            return f"frame {self.seq} came numbered {str(seq)[:20]} (missing, repeated or forged)"
        self.seq += 1
        if self.stage == "ended":
            return f"a {kind[:40]!r} frame after the job ended"
        if kind in TERMINAL:
            self.stage = "ended"
            return ""
        if self.stage == "start":
            if kind != "hello":
                return f"a {kind[:40]!r} frame before hello"
            self.stage = "ready"
            return ""
        if kind in ("violation", "oversize"):
            return ""
        if kind == "collected":
            return self._advance("collected", ("ready", "recheck"), kind)
        if kind == "phase":
            if frame.get("name") != "recheck":
                return f"an unknown phase {str(frame.get('name'))[:40]!r}"
            return self._advance("recheck", ("ready",), "phase recheck")
        if kind == "start":
            return self._start(str(frame.get("test", "")))
        if kind == "recheck":
            return self._answer(frame.get("index"))
        if kind == "outcome":
            outcome = frame.get("outcome")
            nodeid = outcome.get("nodeid") if isinstance(outcome, dict) else None
            if self.stage != "tests" or nodeid != self.current:
                return f"an outcome of {str(nodeid)[:120]!r} while {self.current[:120] or 'no test'!r} runs"
            return ""
        if kind == "evidence":  # one per item, after its tests (a second for one item is the parent's to flag)
            return self._advance("evidence", ("ready", "recheck", "collected", "tests", "evidence"), kind)
        return f"an unknown frame {kind[:40]!r}"

    def _advance(self, stage: str, after: tuple[str, ...], what: str) -> str:
        if self.stage not in after:
            return f"{what} out of order (after {self.stage})"
        self.stage = stage
        self.current = ""
        return ""

    def _start(self, test: str) -> str:
        if self.stage == "recheck":
            if self.current:
                return f"re-check case {self.case} started twice"
            self.current = test
            return ""
        if self.stage == "collected":
            self.stage = "tests"
        if self.stage != "tests":
            return f"a test started during {self.stage}"
        if test in self.started:
            return f"{test[:120]!r} started twice"
        self.started.add(test)
        self.current = test
        return ""

    def _answer(self, index: Any) -> str:
        if self.stage != "recheck" or not self.current:
            return "a re-check answer out of order"
        if index != self.case or isinstance(index, bool):
            return f"re-check answer {str(index)[:20]} where case {self.case} was due"
        self.case += 1
        self.current = ""
        return ""
