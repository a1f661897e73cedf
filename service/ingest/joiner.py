"""Reassemble lines the container runtime split into chunks.

Docker's json-file driver splits lines longer than 16 KiB into entries of which only the
last ends in ``\\n``; CRI runtimes write ``P`` chunks closed by an ``F`` line. The envelope
marks such chunks with ``meta[PARTIAL]``; the joiner keeps them per (stream, fd) until the
closing record arrives. Memory is bounded: a line longer than ``max_line`` characters is
truncated (counted once as ``oversize``) and at most ``max_streams`` lines are held (the
oldest is emitted unfinished when a new one would exceed that).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator

from service import ratelog
from service.ingest.envelope import MAX_LINE
from service.ingest.json_text import expand_vllm_json
from service.ingest.lines import PARTIAL
from service.records import LogRecord


class _Pending:
    __slots__ = ("first", "parts", "size", "truncated", "since")

    def __init__(self, first: LogRecord, now: float) -> None:
        self.first = first
        self.parts = [first.text]
        self.size = len(first.text)
        self.truncated = False
        self.since = now


class Joiner:
    """Stateful per-stream joiner; feed records in arrival order, flush at end of input."""

    def __init__(
        self, max_line: int = MAX_LINE, *, source: str = "joiner", max_streams: int = 10_000
    ) -> None:
        self.max_line = max_line
        self.source = source
        self.max_streams = max_streams
        self._pending: dict[tuple[str, str | None], _Pending] = {}

    def __len__(self) -> int:
        """Number of unfinished lines held."""
        return len(self._pending)

    def push(self, rec: LogRecord, out: list[LogRecord]) -> None:
        """Consume one record; append every record it completes to ``out``."""
        meta = rec.meta
        if meta.get(PARTIAL):
            del meta[PARTIAL]
            key = (rec.stream, meta.get("fd"))
            pending = self._pending.get(key)
            if pending is None:
                if len(self._pending) >= self.max_streams:
                    oldest = next(iter(self._pending))
                    out.extend(self._finish(self._pending.pop(oldest)))
                pending = self._pending[key] = _Pending(rec, time.monotonic())
                if pending.size > self.max_line:
                    pending.parts[0] = rec.text[: self.max_line]
                    pending.size = self.max_line
                    self._overflow(pending)
            else:
                self._append(pending, rec.text)
            return
        if self._pending:
            pending = self._pending.pop((rec.stream, meta.get("fd")), None)
            if pending is not None:
                self._append(pending, rec.text)
                out.extend(self._finish(pending))
                return
        out.append(rec)

    def feed(self, records: Iterable[LogRecord]) -> list[LogRecord]:
        """Consume a batch; return the complete records it yields, in order."""
        out: list[LogRecord] = []
        push = self.push
        pending = self._pending
        append = out.append
        for rec in records:
            if pending or rec.meta.get(PARTIAL):
                push(rec, out)
            else:
                append(rec)  # fast path: a complete line and nothing held
        return out

    def join(self, records: Iterable[LogRecord]) -> Iterator[LogRecord]:
        """Generator form of :meth:`feed` (does not flush at the end)."""
        out: list[LogRecord] = []
        push = self.push
        for rec in records:
            push(rec, out)
            if out:
                yield from out
                out.clear()

    def checkpoint(self) -> dict[tuple[str, str | None], tuple[_Pending, int, int, bool]]:
        """Cheap snapshot of the held lines (O(streams held)) for :meth:`rollback`."""
        return {k: (p, len(p.parts), p.size, p.truncated) for k, p in self._pending.items()}

    def rollback(self, mark: dict[tuple[str, str | None], tuple[_Pending, int, int, bool]]) -> None:
        """Undo everything fed since ``mark`` was taken: when the batch that completed lines
        could not be stored, the sender retries it and its chunks must not count twice."""
        self._pending = {}
        for key, (pending, parts, size, truncated) in mark.items():
            del pending.parts[parts:]
            pending.size = size
            pending.truncated = truncated
            self._pending[key] = pending

    def flush(self, stream: str | None = None) -> list[LogRecord]:
        """Emit held lines unfinished (all, or those of one stream), e.g. at end of a file."""
        keys = [k for k in self._pending if stream is None or k[0] == stream]
        return [rec for k in keys for rec in self._finish(self._pending.pop(k))]

    def flush_idle(self, max_age: float, now: float | None = None) -> list[LogRecord]:
        """Emit lines whose first chunk is older than ``max_age`` seconds (monotonic clock):
        a runtime that died mid-line never sends the closing chunk."""
        now = time.monotonic() if now is None else now
        keys = [k for k, p in self._pending.items() if now - p.since >= max_age]
        return [rec for k in keys for rec in self._finish(self._pending.pop(k))]

    def _append(self, pending: _Pending, text: str) -> None:
        if pending.truncated:
            return
        room = self.max_line - pending.size
        if len(text) > room:
            pending.parts.append(text[:room])
            pending.size = self.max_line
            self._overflow(pending)
        else:
            pending.parts.append(text)
            pending.size += len(text)

    def _overflow(self, pending: _Pending) -> None:
        pending.truncated = True
        ratelog.reject(self.source, "oversize", f"line longer than {self.max_line} chars")

    @staticmethod
    def _finish(pending: _Pending) -> list[LogRecord]:
        """The joined line; a vLLM JSON log record longer than one chunk becomes the lines
        vLLM's text format prints (as the envelope does for a complete one)."""
        first = pending.first
        text = pending.parts[0] if len(pending.parts) == 1 else "".join(pending.parts)
        if text[:1] == "{" and not pending.truncated:
            lines = expand_vllm_json(text)
            if lines is not None:
                pieces = lines.split("\n")
                pos = first.position
                return [
                    LogRecord(
                        first.stream,
                        piece,
                        first.time,
                        first.meta if i == 0 else first.meta.copy(),
                        pos if i == 0 or pos is None else pos.sub(i),
                    )
                    for i, piece in enumerate(pieces)
                ]
        return [LogRecord(first.stream, text, first.time, first.meta, first.position)]
