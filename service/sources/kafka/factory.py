"""The Kafka source from ``sources.kafka``: :func:`make_kafka_source` picks the backend
named by ``client``, the one module that imports both (each imports its client library only
when it connects); :func:`kafka_source` wires it to the sink."""

from __future__ import annotations

import functools
from typing import Any

from service.config import KafkaSettings
from service.sources.base import Sink
from service.sources.kafka.base import Handler, KafkaSourceBase, PartitionCallback
from service.sources.kafka.confluent import ConfluentKafkaSource
from service.sources.kafka.kafka_python import KafkaSource

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


def kafka_source(settings: KafkaSettings | None, sink: Sink) -> KafkaSourceBase | None:
    """The service's Kafka source (not started: ``start()``), None when the source is off
    (no ``sources.kafka``): batches go to ``sink.process``; a rebalance resets the moved
    partitions' streams in the sink."""
    if settings is None:
        return None
    return make_kafka_source(
        settings,
        functools.partial(sink.process, source=SOURCE),
        on_revoked=sink.on_partitions_revoked,
        on_assigned=sink.on_partitions_assigned,
        fmt=settings.format,
    )
