"""Memory budgets for decompressed input, enforced while it is being produced.

A :class:`MemoryBudget` is a process-wide count of bytes held at once (HTTP ``/ingest``
bodies and their gzip output, Forward ``CompressedPackedForward`` entries); a :class:`Lease`
is one request's share of it, with its own limit. :func:`gunzip_bounded` inflates in
:data:`STEP`-sized pieces and charges each piece to the lease before keeping it, so a gzip
bomb is refused as soon as the output passes the request's limit (or the global budget is
spent) with at most one step beyond it allocated; the caller drops the partial output at
once. Leases are released when the request is done (context manager).
"""

from __future__ import annotations

import threading
import zlib
from types import TracebackType

from service.ingest.compression import GZIP_MAGIC, DecompressedTooLarge

STEP = 1 << 16  # bytes of compressed input fed, and of output taken, per inflate call
MiB = 1 << 20
GLOBAL_DECOMPRESSED_BYTES = 256 * MiB  # all requests and Forward messages at once


class BudgetExhausted(ValueError):
    """The process-wide budget is spent by other requests (retry later: a 503, not a 413)."""


class MemoryBudget:
    """Bytes held at once across threads and requests."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._used = 0
        self._peak = 0
        self._lock = threading.Lock()

    @property
    def used(self) -> int:
        return self._used

    @property
    def peak(self) -> int:
        return self._peak

    def try_take(self, n: int) -> bool:
        with self._lock:
            if self._used + n > self.limit:
                return False
            self._used += n
            self._peak = max(self._peak, self._used)
            return True

    def give(self, n: int) -> None:
        with self._lock:
            self._used = max(0, self._used - n)


DECOMPRESSED = MemoryBudget(GLOBAL_DECOMPRESSED_BYTES)


class Lease:
    """One request's bytes: at most ``limit`` of its own, each also taken from ``budget``.

    :meth:`take` raises :class:`~service.ingest.compression.DecompressedTooLarge` past the
    request's limit, :class:`BudgetExhausted` when the global budget is spent."""

    def __init__(self, limit: int, budget: MemoryBudget | None = None) -> None:
        self.limit = limit
        self.budget = DECOMPRESSED if budget is None else budget
        self.held = 0

    def take(self, n: int) -> None:
        if self.held + n > self.limit:
            raise DecompressedTooLarge(f"input expands beyond {self.limit} bytes")
        if not self.budget.try_take(n):
            raise BudgetExhausted(
                f"decompression budget of {self.budget.limit} bytes in use by other requests"
            )
        self.held += n

    def hold(self, n: int) -> None:
        """Charge ``n`` bytes to the global budget only (e.g. the body as received, which
        its own size limit already bounds)."""
        if not self.budget.try_take(n):
            raise BudgetExhausted(
                f"decompression budget of {self.budget.limit} bytes in use by other requests"
            )
        self.held += n

    def release(self) -> None:
        if self.held:
            self.budget.give(self.held)
            self.held = 0

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def gunzip_bounded(
    data: bytes | bytearray | memoryview, lease: Lease, step: int = STEP
) -> bytearray:
    """Inflate gzip ``data`` (several concatenated members allowed, as Fluentd writes them),
    charging every piece of output to ``lease`` before keeping it.

    Raises ``ValueError`` when corrupt or truncated, ``DecompressedTooLarge`` past the lease's
    limit and :class:`BudgetExhausted` when the global budget is spent; the output built so
    far is then garbage at once (the lease still holds its bytes until released)."""
    out = bytearray()
    try:
        return _inflate(memoryview(data), lease, step, out)
    except BaseException:
        out.clear()  # free the partial output now, whoever still holds this frame
        raise


def _inflate(view: memoryview, lease: Lease, step: int, out: bytearray) -> bytearray:
    n = len(view)
    if not n:
        return out
    inflater = zlib.decompressobj(wbits=31)
    pos = 0
    pending: bytes | memoryview = b""
    full = False  # the last call filled its output: the inflater may hold more
    while True:
        if not pending and not full:
            if pos >= n:
                raise ValueError("truncated gzip")
            pending = view[pos : pos + step]
            pos += len(pending)
        try:
            piece = inflater.decompress(pending, step)
        except zlib.error as exc:
            raise ValueError(f"corrupt gzip: {exc}") from None
        pending = inflater.unconsumed_tail
        full = len(piece) == step
        if piece:
            lease.take(len(piece))
            out += piece
        if not inflater.eof:
            continue
        pos -= len(inflater.unused_data)  # the bytes after this member: back to the input
        rest = view[pos:]
        if not rest or rest[:2] != GZIP_MAGIC:
            if bytes(rest).strip(b"\x00"):
                raise ValueError("trailing garbage after gzip member")
            return out
        inflater = zlib.decompressobj(wbits=31)
        pending, full = b"", False
