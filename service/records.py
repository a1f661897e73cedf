"""The plain records every source produces: one physical log line of one stream
(:class:`LogRecord`), what its envelope knew (:class:`Meta`) and where it sits at its source
(:class:`Position`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, NamedTuple, TypedDict, cast


class KubeEvidence(TypedDict, total=False):
    """What a Kubernetes event or pod status line tells the classifier
    (:mod:`service.ingest.kube`)."""

    kind: str  # "event" or "status"
    reason: str
    type: str  # an event's type: "Warning", "Normal"
    id: str  # the same event or termination seen again counts once
    life: str  # "ended" or "created": the pod's lifecycle
    life_only: bool  # lifecycle evidence only
    pod_only: bool  # no container named: the pod's stream


class Meta(TypedDict, total=False):
    """What a record's envelope knew about where the line came from (every key optional)."""

    namespace: str
    pod: str
    container: str
    container_id: str  # without its runtime prefix (``containerd://``)
    pod_id: str
    node: str
    image: str
    image_id: str
    labels: dict[str, str]  # the pod's labels
    fd: str  # "stdout" or "stderr"
    tag: str  # the Fluent tag
    partial: bool  # a chunk of an unfinished line, for the joiner (ingest.lines.PARTIAL)
    kube: KubeEvidence  # a Kubernetes event or pod status line


# the keys of Meta whose values are text
MetaText = Literal[
    "namespace", "pod", "container", "container_id", "pod_id", "node", "image", "image_id"
]


def fill_meta(meta: Meta, more: Mapping[str, object]) -> None:
    """Set the keys of ``more`` that ``meta`` lacks (``more`` holds :class:`Meta` keys)."""
    plain = cast(dict[str, object], meta)
    for key, value in more.items():
        plain.setdefault(key, value)


@dataclass(slots=True)
class LogRecord:
    """One log line after the envelope (Docker, CRI, Fluent record ...) was removed.

    ``stream`` identifies the workload stream (``namespace/pod/container`` when Kubernetes
    metadata is known, else a container id, a Fluent tag or the file path). ``time`` is the
    container runtime's timestamp (epoch seconds) when the envelope carried one; vLLM's own
    header time has no year and is display-only. ``meta`` carries what the envelope knew
    (:class:`Meta`). ``position`` is where the record sits at its source (a
    :class:`Position`; ``part`` tells apart the 2nd, 3rd ... record of one message), used to
    make re-delivery idempotent.
    """

    stream: str
    text: str
    time: float | None = None
    meta: Meta = field(default_factory=lambda: Meta())
    position: Position | None = None


class Position(NamedTuple):
    """Where a record sits at its source: ``source`` (``kafka``, ``file``), ``partition``
    (``<topic>:<partition>``, a path), the integer ``offset`` in it, and ``part``, which
    record of the message at that offset it is (``""`` the first; ``1``, ``2`` ... the
    next lines; ``evicted``, ``idle0`` ... as the Kafka source marks lines it emits
    unfinished; nested with ``#``). Its text (``str(position)``) is
    ``<source>:<partition>:<offset>``, then ``#<part>`` when there is one."""

    source: str
    partition: str
    offset: int
    part: str = ""

    def __str__(self) -> str:
        text = f"{self.source}:{self.partition}:{self.offset}"
        return f"{text}#{self.part}" if self.part else text

    def sub(self, part: int | str) -> Position:
        """The position of another record of this one's message: ``#<part>`` appended."""
        return self._replace(part=f"{self.part}#{part}" if self.part else str(part))

    @classmethod
    def parse(cls, text: str | None) -> Position | None:
        """The position ``text`` names, without its part: ``kafka:topic:3:1234#2`` →
        ``Position("kafka", "topic:3", 1234)``;
        ``file:path:12`` → ``Position("file", "path", 12)``; None when there is no integer
        offset."""
        if not text:
            return None
        source, _, rest = text.partition(":")
        partition, _, offset = rest.split("#", 1)[0].rpartition(":")
        if not partition or not offset.isdigit():
            return None
        return cls(source, partition, int(offset))
