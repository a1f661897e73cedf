"""Whole-file classification that scans blocks, not lines.

A file is read in large blocks; one Aho-Corasick pass over each (lowercased) block finds
every line that holds a literal some rule, stage marker or failure word needs. Only those
lines are decoded and fed to the classifier; the lines in between are counted in bulk.
What the classifier does is unchanged (the exact patterns still decide); the scan only
selects, and it selects exactly what the per-line path would have looked at:

* a stream that is serving (and not shutting down) needs only the lines with a gate word
  (:attr:`RuleBook.gate_words`) or a stats line: the per-line path skips the others too;
* a stream still starting needs every line with any rule literal, failure word, level or
  traceback token; its other lines only move the line counter;
* while an incident is open and still collecting evidence, or a traceback is open, every
  line is fed (they are its evidence / frames).

Raw text and CRI files (the container runtime's format) take this path; anything else
(JSON envelopes, gzip, stdin, a CRI partial line, invalid UTF-8 or NUL bytes in a block)
goes line by line through the same decoder as :func:`service.sources.files.read_file`.
"""

from __future__ import annotations

import bisect
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import ahocorasick

from service import metrics
from service.classify.engine import Classifier
from service.classify.multimatch import LiteralScanner
from service.classify.stream_state import STARTING
from service.incidents.incident import MAX_EVIDENCE, Change, Incident
from service.ingest.container_lines import split_cri
from service.ingest.envelope import MAX_LINE, Format, decode_line
from service.ingest.fluent_record import stream_key
from service.ingest.runtime_paths import path_meta
from service.ingest.timestamps import line_time
from service.parse.line import EMPTY, parse_line
from service.records import LogRecord
from service.sources.files import salvage_line

BLOCK = 4 << 20  # bytes read at a time
WINDOW = 64 << 10  # characters a starting stream's scan looks at per call
_ENVELOPE_START = frozenset("{0123456789")  # a line auto-detection may read as JSON or CRI
# Words that make a line of a starting stream worth parsing although no rule literal is in
# it: levels, traceback tokens and the failure vocabulary that sends a line to the model.
# (and "pid=": a process prefix with a new pid starts a new run)
STARTUP_WORDS = (
    "error",
    "critical",
    "fatal",
    "panic",
    "emerg",
    "[e]",
    "exception",
    "exit",
    "interrupt",
    "failure",
    "fault",
    "fail",
    "cannot",
    "can't",
    "unable to",
    "refused",
    "denied",
    "killed",
    "segmentation",
    "core dumped",
    "abort",
    "timed out",
    "timeout",
    "out of memory",
    "no such",
    "not found",
    "mismatch",
    "invalid",
    "xid",
    "warn",
    "traceback",
    'file "',
    "during handling",
    "the above exception",
    "process ",
    "wait",
    "^",
    "~",
    "pid=",
)
SERVING_WORDS = ("throughput",)


class BlockScanner:
    """The two automatons (starting / serving) of one rule book."""

    def __init__(self, clf: Classifier) -> None:
        lits = clf.rules.literals
        gate = clf.rules.gate_words
        self.usable = bool(lits) and bool(gate)
        self.starting = _automaton([*(lits or []), *gate, *STARTUP_WORDS])
        self.serving = _automaton([*gate, *SERVING_WORDS])
        self.serving_hs = LiteralScanner([*gate, *SERVING_WORDS])  # the same words

    def hits(self, text: str) -> BlockHits:
        return BlockHits(self, text)


class BlockHits:
    """Where the literals of each automaton end in one block (one pass each, on demand):
    the serving words by one Hyperscan scan of an ASCII block, else by the automaton over
    the lowercased block."""

    def __init__(self, scanner: BlockScanner, text: str) -> None:
        self._scanner, self._text = scanner, text
        self._lowered: str | None = None
        self._serving_ends: list[int] | None = None

    @property
    def _low(self) -> str:
        if self._lowered is None:
            self._lowered = self._text.lower()
        return self._lowered

    def next(self, start: int, serving: bool) -> int | None:
        """Index of the end of the first literal found at or after ``start``."""
        if not serving:  # rare (start-up): scan a window at a time from ``start``
            return self._windowed(start)
        ends = self._serving_ends
        if ends is None:
            ends = self._scanner.serving_hs.ends(self._text)
            if ends is None:
                ends = [end for end, _ in self._scanner.serving.iter(self._low)]
            self._serving_ends = ends
        i = bisect.bisect_left(ends, start)
        return ends[i] if i < len(ends) else None

    def _windowed(self, start: int) -> int | None:
        low, n = self._low, len(self._low)
        while start < n:
            stop = low.find("\n", min(n, start + WINDOW)) + 1 or n  # whole lines only
            end: int
            for end, _ in self._scanner.starting.iter(low[start:stop]):
                return start + end
            start = stop
        return None


def _automaton(words: list[str]) -> Any:
    auto = ahocorasick.Automaton()
    for w in {w.lower() for w in words if w}:
        auto.add_word(w, w)
    auto.make_automaton()
    return auto


def sniff(path: str) -> Format | None:
    """RAW or CRI when every line of the file's head is of that format, else None."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(1 << 16)
    except OSError:
        return None
    if head[:2] == b"\x1f\x8b" or b"\x00" in head:
        return None
    lines = [ln for ln in head.decode("utf-8", "replace").split("\n")[:-1] if ln.strip()]
    if not lines:
        return None
    if all(split_cri(ln) is not None for ln in lines):
        return Format.CRI
    if any(ln.lstrip()[:1] == "{" for ln in lines) or any(split_cri(ln) for ln in lines):
        return None
    return Format.RAW


def classify_file(
    path: str,
    clf: Classifier,
    fmt: Format,
    on_block: Callable[[int], None] | None = None,
    *,
    decode_as: Format | str = Format.AUTO,
    year: int | None = None,
) -> tuple[str, dict[str, Incident]]:
    """Feed ``path`` (RAW or CRI, see :func:`sniff`) to ``clf`` by blocks; returns the stream
    key and the incidents its changes touched. ``on_block(bytes)`` reports progress; the
    selected lines are decoded as ``decode_as`` (the caller's format: auto-detected per line
    like the per-line path, so a JSON line later in a text file is still a JSON record);
    ``year`` completes the times lines print without one (default: this year)."""
    meta = path_meta(path)
    key = stream_key(meta, path) if meta else path
    seen: dict[str, Incident] = {}
    scanner = BlockScanner(clf)
    _collect(seen, clf.open_stream(key, meta)[1])
    year = time.gmtime().tm_year if year is None else year
    lines_in = 0
    last = ""

    def decode(line: str) -> list[LogRecord]:
        return decode_line(line, path, decode_as, None, meta, "file")

    plain = not meta and decode_as in (Format.AUTO, Format.RAW, "auto", "raw")

    def feed(line: str) -> None:
        nonlocal lines_in
        lines_in += 1
        cur = clf.tracker.streams.get(key)
        if (
            plain
            and cur is not None
            and line[:1] not in _ENVELOPE_START
            and len(line) <= MAX_LINE
            and "\r" not in line[-1:]
        ):
            # a plain text line of a known stream: what decode_line + feed would do
            t = line_time(line, year) if cur.status == STARTING else None
            _collect(seen, clf.feed_text(cur, line, t))
            return
        for rec in decode(line):
            cur = clf.tracker.streams.get(rec.stream)
            if rec.time is None and (cur is None or cur.status == STARTING):
                rec.time = line_time(rec.text, year)
            _collect(seen, clf.feed(rec))

    for text in _text_blocks(path, on_block):
        if isinstance(text, bytes):
            for raw in text.split(b"\n")[:-1]:
                line = salvage_line(raw)
                if line is not None:
                    feed(line)
            continue
        if not scanner.usable or (
            fmt is Format.CRI and (" stdout P " in text or " stderr P " in text)
        ):
            for line in text.split("\n")[:-1]:
                feed(line)
            continue
        hits = scanner.hits(text)
        pos, end = 0, len(text)
        while pos < end:
            st = clf.state(key)  # a new run may bring a new state object
            if _feed_everything(clf, st):
                nl = text.find("\n", pos)
                nl = end if nl < 0 else nl
                feed(text[pos:nl])
                pos = nl + 1
                continue
            serving = st.stage == "serving" and not st.shutting_down
            hit = hits.next(pos, serving)
            if hit is None:
                start = end
            else:
                cut = text.rfind("\n", pos, hit)
                start = pos if cut < 0 else cut + 1
            if start > pos:
                _skip(clf, st, text, pos, start, serving, decode, year)
            if hit is None:
                break
            nl = text.find("\n", hit)
            nl = end if nl < 0 else nl
            feed(text[start:nl])
            pos = nl + 1
        last = text
    st = clf.state(key)
    for line in reversed(last[-(1 << 16) :].split("\n")):  # the last line that prints a time
        t = _time_of(line, fmt, year) if line.strip() else None
        if t is not None:
            if st.last_time is None or t > st.last_time:
                st.last_time = t
            break
    metrics.LINES_IN.labels(source="file").inc(lines_in)
    return key, seen


def _feed_everything(clf: Classifier, st: Any) -> bool:
    """Whether every line matters right now: evidence being collected, a traceback open."""
    if st.stage == "serving" and not st.shutting_down:
        return False
    inc = st.current()
    return (inc is not None and len(inc.evidence) < MAX_EVIDENCE) or clf.has_open_traceback(st.key)


def _skip(
    clf: Classifier,
    st: Any,
    text: str,
    a: int,
    b: int,
    serving: bool,
    decode: Callable[[str], list[LogRecord]],
    year: int,
) -> None:
    """Lines ``text[a:b]`` hold nothing any rule looks at: count them, and keep the stream's
    clock, as the per-line path would (serving: every line; starting: every record with
    content, with its time)."""
    if serving:
        n = text.count("\n", a, b)
        st.seq += n
        clf.lines += n
        return
    for ln in text[a:b].split("\n")[:-1]:
        if not ln.strip():
            continue
        for rec in decode(ln):
            if parse_line(rec.text).kind == EMPTY:
                continue
            st.seq += 1
            clf.lines += 1
            t = rec.time
            if t is None and st.status == STARTING:
                t = line_time(rec.text, year)
            if t is not None:
                st.last_time = t
                if st.first_time is None:
                    st.first_time = t


def _text_blocks(path: str, on_block: Callable[[int], None] | None) -> Iterator[str | bytes]:
    """Blocks of whole lines ("\\n"-terminated): text, or bytes for a block with NUL bytes
    or invalid UTF-8 (fed line by line, salvaged and counted as the per-line reader does)."""
    carry = b""
    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(BLOCK)
            if not chunk:
                break
            if on_block is not None:
                on_block(len(chunk))
            data = carry + chunk
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                carry = data
                continue
            carry, data = data[cut:], data[:cut]
            yield _decode(data)
    if carry:
        yield _decode(carry + b"\n")


def _decode(data: bytes) -> str | bytes:
    """The block as text, or its bytes when it holds NUL bytes or invalid UTF-8."""
    if b"\x00" not in data:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            pass
    return data


def _collect(seen: dict[str, Incident], changes: list[Change]) -> None:
    for ch in changes:
        seen[ch.incident.id] = ch.incident


def _time_of(line: str, fmt: Format, year: int) -> float | None:
    if fmt is Format.CRI:
        cri = split_cri(line)
        return cri[0] if cri else None
    return line_time(line, year)


def eligible(path: str, fmt: Format | str) -> Format | None:
    """The format to scan ``path`` by blocks with, or None (use the per-line path)."""
    if path == "-" or not os.path.isfile(path):
        return None
    found = sniff(path)
    if found is None:
        return None
    if fmt in (Format.AUTO, "auto") or fmt == found:
        return found
    return None
