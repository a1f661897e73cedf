"""The service's Kafka source from ``sources.kafka`` (:class:`KafkaConsumerSource`), and
:func:`make_kafka_source`, which picks the backend named by ``client``: the one module that
imports both (each imports its client library only when it connects)."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from service.config import KafkaSettings
from service.sources.base import Sink, SourceHealth, SourceSettingsError
from service.sources.kafka.base import Handler, KafkaSourceBase, PartitionCallback
from service.sources.kafka.confluent import ConfluentKafkaSource
from service.sources.kafka.kafka_python import KafkaSource
from service.sources.kafka.rebalance import RebalanceSink

SOURCE = "kafka"
BACKENDS: dict[str, type[KafkaSourceBase]] = {
    "kafka-python": KafkaSource,
    "confluent-kafka": ConfluentKafkaSource,
}


def make_kafka_source(
    settings: KafkaSettings,
    handler: Handler,
    on_revoked: PartitionCallback | None = None,
    on_assigned: PartitionCallback | None = None,
    **kwargs: Any,
) -> KafkaSourceBase:
    """The backend named by ``settings.client`` (``kafka-python`` or ``confluent-kafka``)."""
    try:
        backend = BACKENDS[settings.client]
    except KeyError:
        raise ValueError(f"unknown kafka client {settings.client!r}") from None
    return backend(settings, handler, on_revoked, on_assigned, **kwargs)


class KafkaConsumerSource:
    """The service's Kafka source: a consumer-group member on a thread of its own, started
    with the sink: batches go to ``sink.process``; a sink that takes rebalance hooks
    (:class:`~service.sources.kafka.rebalance.RebalanceSink`) resets the moved partitions'
    streams."""

    source = SOURCE

    def __init__(self, settings: KafkaSettings) -> None:
        problems = []
        if settings.client not in BACKENDS:
            problems.append(f"sources.kafka.client: unknown client {settings.client!r}")
        if not settings.topics:
            problems.append("sources.kafka.topics: no topic to read")
        if problems:
            raise SourceSettingsError(problems)
        self.settings = settings
        self.consumer: KafkaSourceBase | None = None  # made by start()

    async def start(self, sink: Sink) -> None:
        hooks = sink if isinstance(sink, RebalanceSink) else None
        self.consumer = make_kafka_source(
            self.settings,
            functools.partial(sink.process, source=SOURCE),
            on_revoked=hooks.on_partitions_revoked if hooks else None,
            on_assigned=hooks.on_partitions_assigned if hooks else None,
            fmt=self.settings.format,
        )
        self.consumer.start()

    async def stop(self) -> None:
        """The batch in hand is finished and committed, then the consumer leaves the group."""
        if self.consumer is not None:
            await asyncio.to_thread(self.consumer.stop)

    def health(self) -> SourceHealth:
        if self.consumer is not None:
            return self.consumer.health()
        return SourceHealth(SOURCE, False, {"client": self.settings.client, "assigned": []})


def kafka_source(settings: KafkaSettings | None) -> KafkaConsumerSource | None:
    """The service's Kafka source (not started), None when the source is off (no
    ``sources.kafka``)."""
    return None if settings is None else KafkaConsumerSource(settings)
