"""Pick the Kafka backend named by ``sources.kafka.client``: the one module that imports
both (each imports its client library only when it connects)."""

from __future__ import annotations

from typing import Any

from service.config import KafkaSettings
from service.sources.kafka.base import Handler, KafkaSourceBase, PartitionCallback
from service.sources.kafka.confluent import ConfluentKafkaSource
from service.sources.kafka.kafka_python import KafkaSource

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
