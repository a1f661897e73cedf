"""The plain records every source produces: one physical log line of one stream
(:class:`LogRecord`), and where it sits at its source (:class:`Position`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple


@dataclass(slots=True)
class LogRecord:
    """One log line after the envelope (Docker, CRI, Fluent record ...) was removed.

    ``stream`` identifies the workload stream (``namespace/pod/container`` when Kubernetes
    metadata is known, else a container id, a Fluent tag or the file path). ``time`` is the
    container runtime's timestamp (epoch seconds) when the envelope carried one; vLLM's own
    header time has no year and is display-only. ``meta`` carries what the envelope knew:
    ``namespace``, ``pod``, ``container``, ``container_id``, ``pod_id``, ``node``, ``image``,
    ``image_id``, ``labels`` (dict), ``fd`` (``stdout``/``stderr``), ``tag``. ``position`` is an
    id of the record at its source (``kafka:topic:partition:offset``, ``file:path:lineno``
    ...; a :class:`Position` as text, ``#<i>`` appended for the 2nd, 3rd ... record of one
    message) used to make re-delivery idempotent.
    """

    stream: str
    text: str
    time: float | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    position: str | None = None


class Position(NamedTuple):
    """Where a record sits at its source: ``source`` (``kafka``, ``file``), ``partition``
    (``<topic>:<partition>``, a path) and the integer ``offset`` in it. Its text
    (``str(position)``) is ``<source>:<partition>:<offset>``, the :attr:`LogRecord.position`
    of the first record read there."""

    source: str
    partition: str
    offset: int

    def __str__(self) -> str:
        return f"{self.source}:{self.partition}:{self.offset}"

    @classmethod
    def parse(cls, text: str | None) -> Position | None:
        """``kafka:topic:3:1234#2`` → ``Position("kafka", "topic:3", 1234)``;
        ``file:path:12`` → ``Position("file", "path", 12)``; None when there is no integer
        offset."""
        if not text:
            return None
        source, _, rest = text.partition(":")
        partition, _, offset = rest.split("#", 1)[0].rpartition(":")
        if not partition or not offset.isdigit():
            return None
        return cls(source, partition, int(offset))
