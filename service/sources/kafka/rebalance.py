"""The sinks that keep state per Kafka partition: they take the source's rebalance hooks.

``on_partitions_revoked(partitions)``: another instance owns those partitions now (forget
what was kept of them); ``on_partitions_assigned(partitions)``: this one does, from their
last commit (what was kept of them may be stale). Both run on the consumer's thread, between
batches, and must be quick (:mod:`service.sources.kafka.base`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from service.sources.base import Sink
from service.sources.kafka.partition import Partition


@runtime_checkable
class RebalanceSink(Sink, Protocol):
    """A :class:`~service.sources.base.Sink` that takes the rebalance hooks."""

    def on_partitions_revoked(self, partitions: Iterable[Partition]) -> None: ...

    def on_partitions_assigned(self, partitions: Iterable[Partition]) -> None: ...
