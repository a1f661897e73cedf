"""``POST /ingest`` without a tag: whose lines are these?

Every untagged line used to land on one stream, ``http``, so different pods looked like
restarts of one workload. Now a line is keyed by what its body carries - a record's
Kubernetes metadata (``namespace/pod/container``), its container id, else its own
``container_name`` / ``container_id`` / ``hostname`` / ``host`` field
(:func:`service.ingest.collector_body.body_identity`) - and only a line that names nobody
(a ``text/plain`` body, a bare record) is keyed by the client's address, ``http:<address>``.
Those lines get a ``warning`` in the answer naming the tag to send, and a log line at a
bounded rate (:mod:`service.ratelog`). deploy/README.md states the rule.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from fastapi import Request

from service.ratelog import RateLimitedLog
from service.sources.http.decoding import Decoded

PREFIX = "http:"  # stream keys of lines keyed by the client's address
_LOG = RateLimitedLog(logging.getLogger("vllm_sentinel.ingest"))


class Untagged:
    """One untagged request: the stream key of lines that name no sender, and how many did."""

    def __init__(self, request: Request) -> None:
        self.client = request.client.host if request.client else "unknown"
        self.key = PREFIX + self.client
        self.lines = 0
        self.keyed_by_address = 0

    def watching(self, decode: Callable[..., Decoded]) -> Callable[..., Decoded]:
        """``decode``, counting the lines it keys by the client's address."""

        def counted(*args: object, **kwargs: object) -> Decoded:
            records, rejected = decode(*args, **kwargs)
            self.lines += len(records)
            self.keyed_by_address += sum(1 for r in records if r.stream == self.key)
            return records, rejected

        return counted

    def warning(self) -> str | None:
        """What the answer says (and the log, at a bounded rate), or None when every line
        named its sender."""
        if not self.keyed_by_address:
            return None
        text = (
            f"no tag: {self.keyed_by_address} of {self.lines} lines named no pod, container "
            f"or host and were keyed by the sender's address as stream {self.key!r}; "
            "different workloads behind one address look like restarts of one. Send a tag "
            "per workload: the X-Fluent-Tag header (Fluent Bit: header_tag X-Fluent-Tag) "
            "or ?tag="
        )
        _LOG.warning(
            ("untagged", self.client),
            "POST /ingest from %s without a tag: %d lines keyed as stream %s (send the "
            "X-Fluent-Tag header or ?tag= per workload)",
            self.client,
            self.keyed_by_address,
            self.key,
        )
        return text
