"""One rule for binary junk wherever a log is read: files and stdin (``vllm-sentinel
classify``), ``POST /classify`` and the dashboard's paste page (both read through
:func:`service.sources.files.read_file`), and ``POST /ingest``'s bodies.

* A **junk line** is one that, once its NUL bytes are gone (a crashed writer's padding,
  counted ``nul_bytes``), is empty or at least a third control bytes or undecodable UTF-8:
  it is dropped and counted as a reject (``binary``, :func:`service.ratelog.reject`); the
  other lines are kept (invalid UTF-8 replaced by U+FFFD, counted ``invalid_utf8``) and
  classified.
* A **binary input** is refused as a whole with one line (:func:`binary_input`): an
  executable (ELF, Mach-O, PE, WebAssembly by their magic bytes), or an input whose junk
  lines hold more than nine tenths of its bytes (NUL padding left out) - random bytes, an
  image, a core dump. A real log with a binary chunk in the middle is not one: its junk lines
  are dropped and its failure is reported.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from service import ratelog

EXECUTABLE = "is an executable, not a log (plain or gzip text)"
BINARY = "is a binary file, not a log (plain or gzip text)"
ENOUGH_TEXT = 64 << 10  # bytes of text lines after which an input is a log, whatever follows
TEXT_SHARE = 10  # an input is binary when its text lines hold under 1/TEXT_SHARE of it
_MAGIC = (
    b"\x7fELF",  # Linux
    b"\xcf\xfa\xed\xfe",  # Mach-O 64-bit
    b"\xce\xfa\xed\xfe",  # Mach-O 32-bit
    b"\xca\xfe\xba\xbe",  # Mach-O universal (and Java classes)
    b"\x00asm",  # WebAssembly
)
_CONTROL = bytes(b for b in range(32) if b not in (9, 10, 13, 27)) + b"\x7f"
_ODD_TEXT = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f\ufffd]")


def executable(head: bytes | bytearray) -> bool:
    """``head`` (an input's first bytes) starts like an executable."""
    if head.startswith(_MAGIC):
        return True
    return head[:2] == b"MZ" and b"\0" in head[2:64]  # a Windows PE's DOS header


def junk(raw: bytes | bytearray, undecodable: int) -> bool:
    """A line (NULs already removed) with ``undecodable`` bytes that is at least a third
    control or undecodable bytes."""
    control = len(raw) - len(raw.translate(None, _CONTROL))
    return (control + undecodable) * 3 > len(raw)


def junk_text(text: str) -> bool:
    """The same rule for a line already decoded (U+FFFD stands for an undecodable byte):
    what a structured record (JSON, msgpack) carried as its log line."""
    if _ODD_TEXT.search(text) is None:
        return False
    odd = len(_ODD_TEXT.findall(text))
    return odd * 3 > len(text.encode("utf-8", "surrogatepass"))


def salvage(raw: bytes | bytearray, source: str) -> str | None:
    """Text of a line with NUL bytes or invalid UTF-8; ``None`` for a junk line (counted)."""
    if b"\x00" in raw:
        ratelog.reject(source, "nul_bytes", repr(raw[:80]))
        raw = raw.replace(b"\x00", b"")
        if not raw or junk(raw, 0):
            ratelog.reject(source, "binary", repr(raw[:80]))
            return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("utf-8", "replace")
        if junk(raw, text.count("\ufffd")):
            ratelog.reject(source, "binary", repr(raw[:80]))
            return None
        ratelog.reject(source, "invalid_utf8", repr(raw[:200]))
        return text


def text_lines(body: bytes | bytearray, source: str) -> tuple[str, int]:
    """``(text, junk lines)`` of a body of lines: its junk lines dropped and counted, the
    rest decoded as :func:`salvage` does (a valid body is returned as it is)."""
    if b"\x00" not in body:
        try:
            return body.decode("utf-8"), 0
        except UnicodeDecodeError:
            pass
    kept: list[str] = []
    dropped = 0
    for raw in bytes(body).split(b"\n"):
        if b"\x00" not in raw:
            try:
                kept.append(raw.decode("utf-8"))
                continue
            except UnicodeDecodeError:
                pass
        text = salvage(raw, source)
        if text is None:
            dropped += 1
        else:
            kept.append(text)
    return "\n".join(kept), dropped


class BinaryScan:
    """Feed an input's bytes block by block (:meth:`feed` says when enough is known);
    :meth:`verdict` is why it is refused as a whole, or ``None`` for a log."""

    def __init__(self) -> None:
        self.text = self.junk = 0
        self.why: str | None = None
        self._carry = b""
        self._started = False

    def feed(self, block: bytes | bytearray) -> bool:
        """Take the next block; True once the verdict is known (stop reading)."""
        if not self._started:
            self._started = True
            if executable(block[:64]):
                self.why = EXECUTABLE
                return True
        lines = (self._carry + bytes(block)).split(b"\n")
        self._carry = lines.pop()
        if len(self._carry) > ENOUGH_TEXT:  # one endless line: judge what came so far
            lines.append(self._carry)
            self._carry = b""
        for raw in lines:
            self._line(raw)
        return self.text >= ENOUGH_TEXT

    def _line(self, raw: bytes) -> None:
        raw = raw.replace(b"\x00", b"")
        if not raw.strip():
            return
        try:
            raw.decode("utf-8")
            undecodable = 0
        except UnicodeDecodeError:
            undecodable = raw.decode("utf-8", "replace").count("\ufffd")
        if junk(raw, undecodable):
            self.junk += len(raw)
        else:
            self.text += len(raw)

    def verdict(self) -> str | None:
        if self.why is None and self.text < ENOUGH_TEXT:
            if self._carry:
                self._line(self._carry)
                self._carry = b""
            if self.junk and self.text * TEXT_SHARE < self.junk + self.text:
                self.why = BINARY
        return self.why


def binary_input(blocks: Iterable[bytes | bytearray]) -> str | None:
    """Why an input (its blocks in order) is refused as a whole, or ``None`` for a log:
    :data:`EXECUTABLE` or :data:`BINARY` (reading stops as soon as it is known)."""
    scan = BinaryScan()
    for block in blocks:
        if scan.feed(block):
            break
    return scan.verdict()
