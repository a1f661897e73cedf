"""The plain record every source produces: one physical log line of one stream."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class LogRecord:
    """One log line after the envelope (Docker, CRI, Fluent record ...) was removed.

    ``stream`` identifies the workload stream (``namespace/pod/container`` when Kubernetes
    metadata is known, else a container id, a Fluent tag or the file path). ``time`` is the
    container runtime's timestamp (epoch seconds) when the envelope carried one; vLLM's own
    header time has no year and is display-only. ``meta`` carries what the envelope knew:
    ``namespace``, ``pod``, ``container``, ``container_id``, ``pod_id``, ``node``, ``image``,
    ``image_id``, ``labels`` (dict), ``fd`` (``stdout``/``stderr``), ``tag``. ``position`` is an
    opaque id of the record at its source (``kafka:topic:partition:offset``,
    ``file:path:lineno`` ...) used to make re-delivery idempotent.
    """

    stream: str
    text: str
    time: float | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    position: str | None = None
