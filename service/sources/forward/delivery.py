"""What the Forward server hands its sink, and how.

Runtime chunks (CRI ``P``) are joined across messages and connections, per stream. A batch
goes to the sink as ``sink(records)``, or with ``chunk_ids`` as ``sink(records, chunk_id)``
(``chunk_id`` None for records of no chunk). When the sink raises, or returns False for a
chunk it stored before, the joiner forgets what that batch fed it (the client resends the
chunk, or already did). A line whose closing chunk has not come within ``idle_s`` seconds
(the container died mid-line) is handed over unfinished by :meth:`Delivery.flush_idle_lines`,
and what is still held at shutdown by :meth:`Delivery.flush`. Lines handed over are counted
in ``sentinel_lines_in_total{source}``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from service import metrics
from service.ingest.envelope import MAX_LINE
from service.ingest.joiner import Joiner
from service.ratelog import RateLimitedLog
from service.records import LogRecord

# the sink as the server calls it: sink(records), or with chunk_ids sink(records, chunk_id)
Handler = Callable[..., Awaitable[Any]]
log = logging.getLogger("vllm_sentinel.ingest.forward")
_limited = RateLimitedLog(log)


class Delivery:
    """The server's one joiner and its calls to the sink."""

    def __init__(
        self,
        sink: Handler,
        source: str = "forward",
        *,
        chunk_ids: bool = False,
        join: bool = True,
        max_line: int = MAX_LINE,
        idle_s: float = 5.0,
    ) -> None:
        self.sink = sink
        self.chunk_ids = chunk_ids
        self.joiner = Joiner(max_line, source=source) if join else None
        self.idle_s = idle_s
        self._lines_in = metrics.LINES_IN.labels(source=source)

    async def deliver(self, records: list[LogRecord], chunk_id: str | None) -> None:
        """Join runtime chunks and hand the lines to the sink (raises when it refused them;
        the joiner then forgets what this batch fed it, since the client resends it)."""
        mark = None
        if self.joiner is not None and records:
            mark = self.joiner.checkpoint()
            records = self.joiner.feed(records)
        if not records and chunk_id is None:
            return
        try:
            applied = await self._hand(records, chunk_id)
        except Exception:
            if mark is not None and self.joiner is not None:
                self.joiner.rollback(mark)  # the client will resend these chunks
            raise
        if applied is False:  # a resent chunk, stored before: keep none of its pieces
            if mark is not None and self.joiner is not None:
                self.joiner.rollback(mark)
            return
        self._lines_in.inc(len(records))

    async def flush(self) -> None:
        """Hand over the lines still held unfinished (at shutdown)."""
        if self.joiner is not None:
            rest = self.joiner.flush()
            if rest:
                await self._hand(rest, None)
                self._lines_in.inc(len(rest))

    async def flush_idle_lines(self) -> None:
        """Forever: hand over the lines whose closing chunk never came (run as a task)."""
        assert self.joiner is not None
        while True:
            await asyncio.sleep(self.idle_s / 2)
            stale = self.joiner.flush_idle(self.idle_s)
            if stale:
                try:
                    await self._hand(stale, None)
                    self._lines_in.inc(len(stale))
                except Exception:
                    _limited.error(
                        "sink_unfinished",
                        "forward: sink refused %d unfinished lines",
                        len(stale),
                        exc_info=True,
                    )

    async def _hand(self, records: list[LogRecord], chunk_id: str | None) -> Any:
        """Call the sink as it was given: ``sink(records, chunk_id)`` with ``chunk_ids``
        (``chunk_id`` None for lines that belong to no chunk), else ``sink(records)``."""
        if self.chunk_ids:
            return await self.sink(records, chunk_id)
        return await self.sink(records)
