"""One assigned Kafka partition as the source sees it: its name, its runtime-chunk joiner
and the lines that joiner holds, and the offset that is safe to commit.

Runtime chunks (CRI ``P`` / Docker 16 KiB partials) are joined per partition. Positions
handed on never go backwards within a partition (a handler may skip any offset at or below
the highest it applied): a joined line takes the position of its *closing* chunk, a line the
joiner evicts unfinished takes ``<position>#evicted``, and a line whose closing chunk never
came is emitted unfinished, once it is ``join_idle_s`` old, just before the next message of
its partition, with that message's offset (``kafka:t:p:<offset>#idle<i>``). The commit never
passes the first chunk of a line still held, so a crash while a line is half-read re-reads
its chunks.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from service.ingest.joiner import Joiner
from service.ingest.lines import PARTIAL
from service.records import LogRecord, Position


class Partition(NamedTuple):
    """A topic partition, independent of the client library (equal to kafka-python's
    ``TopicPartition`` and to a plain ``(topic, partition)`` tuple)."""

    topic: str
    partition: int


@dataclass(slots=True)
class PartitionState:
    """What the source knows about one assigned partition."""

    joiner: Joiner
    # (stream, fd) of every line the joiner holds -> (offset of its 1st chunk, monotonic time)
    held: dict[tuple[str, Any], tuple[int, float]] = field(default_factory=dict)
    next: int | None = None  # offset after the last message decoded
    committed: int | None = None  # last offset this source committed

    def held_min(self) -> int | None:
        return min(v[0] for v in self.held.values()) if self.held else None

    def safe_offset(self) -> int | None:
        """The offset to commit: past everything handed to the handler, not past a held chunk."""
        if self.next is None:
            return None
        low = self.held_min()
        return self.next if low is None else min(low, self.next)

    def push(self, rec: LogRecord, offset: int, out: list[LogRecord]) -> None:
        """Feed the joiner, mirror which lines it holds (and since when), and give what it
        emits the position of the record that completed it."""
        meta = rec.meta
        key = (rec.stream, meta.get("fd"))
        held = self.held
        n = len(out)
        if meta.get(PARTIAL):
            new = key not in held
            if new and len(held) >= self.joiner.max_streams:  # the joiner emits its oldest line
                del held[next(iter(held))]
            self.joiner.push(rec, out)
            for i in range(n, len(out)):  # an evicted, unfinished line
                out[i].position = None if rec.position is None else rec.position.sub("evicted")
            if new:
                held[key] = (offset, time.monotonic())
            return
        closes = held.pop(key, None) is not None
        self.joiner.push(rec, out)
        if closes:
            for i in range(n, len(out)):  # the joined line: complete at its closing chunk
                out[i].position = rec.position

    def release_idle(self, idle_s: float, position: Position, out: list[LogRecord]) -> None:
        """Emit (unfinished) the lines held longer than ``idle_s``, positioned at the message
        being decoded so that positions never go backwards."""
        now = time.monotonic()
        if now - min(v[1] for v in self.held.values()) < idle_s:
            return
        for i, rec in enumerate(self.joiner.flush_idle(idle_s, now)):
            self.held.pop((rec.stream, rec.meta.get("fd")), None)
            rec.position = position.sub(f"idle{i}")
            out.append(rec)

    def rewind(self, offset: int, joiner: Joiner) -> None:
        """After a failed batch: re-read from ``offset`` with a fresh joiner."""
        self.next = offset
        self.held.clear()
        self.joiner = joiner


def names(tps: Iterable[Partition]) -> str:
    """``topic[partition], ...`` for a log line."""
    return ", ".join(f"{tp.topic}[{tp.partition}]" for tp in tps) or "nothing"


def describe(offsets: dict[Partition, int]) -> str:
    """``topic[partition]@offset, ...`` for a log line."""
    return ", ".join(f"{tp.topic}[{tp.partition}]@{off}" for tp, off in sorted(offsets.items()))
