"""File / stdin source: log files (plain or gzip, any envelope) to :class:`LogRecord` s.

Files are read in binary blocks and split on ``\\n`` (a ``\\r`` stays on the line), so a
line is never held beyond ``max_line`` bytes: longer ones are cut there (``oversize``) and the
rest of the line is skipped. Bad bytes never stop the read: a line with invalid UTF-8 is kept
with U+FFFD (``invalid_utf8``, once per line); NUL bytes (crash padding) are removed
(``nul_bytes``); a line that is at least a third control bytes or undecodable bytes is binary
junk and dropped (``binary``): the rule of :mod:`service.ingest.junk`, whose
:func:`~service.ingest.junk.binary_input` says when a whole input is refused. Gzip is detected by its magic bytes, not the file name.
A JSON document printed over many lines (``kubectl get events -o json``) is read whole
(:mod:`service.ingest.documents`).

``position`` is ``file:<path>:<lineno>`` (1-based physical line). The stream key is the path
as given (``stdin`` for ``-``) unless the envelope or a kubelet/Docker log path names the
container (see :mod:`service.ingest.runtime_paths`).
"""

from __future__ import annotations

import gzip
import io
import sys
import zlib
from collections.abc import Iterable, Iterator
from typing import BinaryIO, TypedDict, Unpack

from service import metrics, ratelog
from service.ingest.documents import read_document
from service.ingest.envelope import MAX_LINE, Format, decode_line
from service.ingest.joiner import Joiner
from service.ingest.junk import salvage
from service.ingest.runtime_paths import path_meta
from service.records import LogRecord, Position

_BLOCK = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b"
_COUNT_EVERY = 4096


class ReadOptions(TypedDict, total=False):
    """How :func:`read_file` reads (its keyword arguments)."""

    fmt: Format | str
    stream: str | None
    max_line: int
    join: bool
    source: str
    stdin: BinaryIO | None


def read_files(paths: Iterable[str], **options: Unpack[ReadOptions]) -> Iterator[LogRecord]:
    """Records of every path in turn (``-`` = ``stdin`` or ``sys.stdin.buffer``).

    ``stream`` overrides the default stream key; ``join=False`` leaves runtime chunks
    (``meta["partial"]``) unjoined. Unreadable files are counted (``unreadable``) and skipped.
    """
    for path in paths:
        yield from read_file(path, **options)


def read_file(
    path: str,
    *,
    fmt: Format | str = Format.AUTO,
    stream: str | None = None,
    max_line: int = MAX_LINE,
    join: bool = True,
    source: str = "file",
    stdin: BinaryIO | None = None,
) -> Iterator[LogRecord]:
    """Records of one file (see :func:`read_files`)."""
    raw_fh: BinaryIO | None = None
    try:
        if path == "-":
            fh = _maybe_gzip(stdin if stdin is not None else sys.stdin.buffer)
        else:
            raw_fh = open(path, "rb")  # noqa: SIM115 - closed in finally
            fh = _maybe_gzip(raw_fh)
    except OSError as exc:
        if raw_fh is not None:
            raw_fh.close()
        ratelog.reject(source, "unreadable", f"{path}: {exc}")
        return
    default = stream or ("stdin" if path == "-" else path)
    meta = path_meta(path) if path != "-" else {}
    joiner = Joiner(max_line, source=source) if join else None
    lines_in = metrics.LINES_IN.labels(source=source)
    count = 0
    lineno = 0
    try:
        # a multi-line JSON document (kubectl get events -o json) is read whole
        document = (
            read_document(fh, default, meta, Position("file", path, 1), source, max_line)
            if fmt == Format.AUTO
            else None
        )
        if document:
            count += len(document)
            yield from document
        for block in _blocks(fh, max_line, source) if document is None else ():
            decoded: list[LogRecord] = []
            for raw in block:
                lineno += 1
                if b"\x00" in raw:
                    text = salvage(raw, source)
                    if text is None:
                        continue
                else:
                    try:
                        text = raw.decode("utf-8")
                    except UnicodeDecodeError:
                        text = salvage(raw, source)
                        if text is None:
                            continue
                # positional on purpose: keyword passing costs ~20% of this loop
                decoded += decode_line(
                    text, default, fmt, Position("file", path, lineno), meta, source, max_line
                )
            out = joiner.feed(decoded) if joiner is not None else decoded
            if out:
                count += len(out)
                yield from out
                if count >= _COUNT_EVERY:
                    lines_in.inc(count)
                    count = 0
    except (OSError, EOFError, zlib.error) as exc:
        ratelog.reject(source, "unreadable", f"{path}: {exc}")
    finally:
        if raw_fh is not None:
            fh.close()
            raw_fh.close()
    if joiner is not None:
        rest = joiner.flush()
        count += len(rest)
        yield from rest
    if count:
        lines_in.inc(count)


def _maybe_gzip(fh: BinaryIO) -> BinaryIO:
    if not hasattr(fh, "peek"):
        fh = io.BufferedReader(fh)  # type: ignore[type-var]  # a raw binary stream
    if fh.peek(2)[:2] == _GZIP_MAGIC:
        return gzip.GzipFile(fileobj=fh)  # type: ignore[return-value]
    return fh


def _blocks(fh: BinaryIO, max_line: int, source: str) -> Iterator[list[bytes]]:
    """Physical lines without ``\\n``, a block at a time, never holding more than
    ``max_line`` bytes of one line."""
    carry = b""
    skipping = False
    read = fh.read
    while True:
        block = read(_BLOCK)
        if not block:
            break
        if skipping:
            nl = block.find(b"\n")
            if nl < 0:
                continue
            block = block[nl + 1 :]
            skipping = False
        if carry:
            block = carry + block
        lines = block.split(b"\n")
        carry = lines.pop()
        if len(block) > max_line and lines and max(map(len, lines)) > max_line:
            lines = [_bounded(line, max_line, source) for line in lines]
        yield lines
        if len(carry) > max_line:
            ratelog.reject(source, "oversize", f"line longer than {max_line} bytes")
            yield [_cut(carry, max_line)]
            carry = b""
            skipping = True
    if carry:
        yield [carry]


def _bounded(line: bytes, max_line: int, source: str) -> bytes:
    if len(line) <= max_line:
        return line
    ratelog.reject(source, "oversize", f"line of {len(line)} bytes")
    return _cut(line, max_line)


def _cut(data: bytes, limit: int) -> bytes:
    """``data[:limit]`` moved back to a UTF-8 character boundary."""
    i = limit
    while i > limit - 4 and i > 0 and data[i] & 0xC0 == 0x80:
        i -= 1
    return data[:i]


def salvage_line(raw: bytes, source: str = "file") -> str | None:
    """One physical line as text, the way :func:`read_file` decodes it (NUL bytes and invalid
    UTF-8 salvaged and counted; None when nothing is left)."""
    if b"\x00" in raw:
        return salvage(raw, source)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return salvage(raw, source)
