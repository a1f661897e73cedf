"""The kafka-python (3.0.x) backend of :class:`~service.sources.kafka.base.KafkaSourceBase`
(``client: kafka-python``, the default)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from service.sources.kafka.base import KafkaSourceBase, Message
from service.sources.kafka.client_config import kafka_python_config
from service.sources.kafka.partition import Partition, describe

if TYPE_CHECKING:
    from kafka import KafkaConsumer

log = logging.getLogger(__name__)


class KafkaSource(KafkaSourceBase):
    """The kafka-python (3.0.x) backend.

    kafka-python 3.0 drives the network on a background thread that also runs rebalance
    listeners; a *sync* listener calling ``consumer.commit()`` raises ``RuntimeError``
    ("Cannot block on net.run() from the IO thread"). The listener here is therefore an
    ``AsyncConsumerRebalanceListener`` that awaits ``commit_async`` (the same commit,
    awaited on the network thread).
    """

    client_name = "kafka-python"
    _consumer: KafkaConsumer | None = None  # while connected

    def _open(self) -> None:
        from kafka import KafkaConsumer

        _warn_pure_python_crc()
        consumer = KafkaConsumer(**kafka_python_config(self.settings))
        try:
            consumer.subscribe(self.settings.topics, listener=_make_listener(self, consumer))
        except Exception:
            consumer.close(autocommit=False)
            raise
        self._consumer = consumer
        log.info(
            "kafka(kafka-python): consuming %s as group %s from %s",
            ", ".join(self.settings.topics),
            self.settings.group,
            self.settings.bootstrap,
        )

    def _poll(self, timeout_s: float, max_records: int) -> list[Message]:
        assert self._consumer is not None
        polled = self._consumer.poll(timeout_ms=int(timeout_s * 1000), max_records=max_records)
        if not polled:
            return []
        return [
            (r.topic, r.partition, r.offset, r.key, r.value)
            for records in polled.values()
            for r in records
        ]

    def _commit(self, offsets: dict[Partition, int]) -> None:
        assert self._consumer is not None
        self._consumer.commit(_kafka_python_offsets(offsets))

    def _seek(self, tp: Partition, offset: int) -> None:
        from kafka import TopicPartition

        assert self._consumer is not None
        self._consumer.seek(TopicPartition(tp.topic, tp.partition), offset)

    def _end_offset(self, tp: Partition) -> int | None:
        from kafka import TopicPartition

        assert self._consumer is not None
        ktp = TopicPartition(tp.topic, tp.partition)
        try:
            high: int | None = self._consumer.highwater(ktp)
        except Exception:  # no longer assigned
            return None
        if high is None:
            high = self._consumer.end_offsets([ktp], timeout_ms=2000).get(ktp)
        return high

    def _close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            # the listener commits what is done before the partitions are given up
            consumer.close(autocommit=False)


_crc_warned = False


def _warn_pure_python_crc() -> None:
    """kafka-python checks every record batch's CRC32C; without the ``crc32c`` package it
    does so in pure Python, which made consuming ~10x slower in scripts/bench_kafka.py."""
    global _crc_warned
    if _crc_warned:
        return
    _crc_warned = True
    try:
        from kafka.record import util as record_util

        pure = getattr(record_util, "crc32c_c", object()) is None
    except ImportError:
        return
    if pure:
        log.warning(
            "kafka(kafka-python): CRC32C is computed in pure Python (about 10x slower "
            "consumption); install the 'crc32c' package or use client: confluent-kafka"
        )


def _kafka_python_offsets(offsets: dict[Partition, int]) -> dict[Any, Any]:
    from kafka import TopicPartition
    from kafka.structs import OffsetAndMetadata

    # three fields: OffsetAndMetadata gained leader_epoch in 2.x and 2.3 required it
    return {
        TopicPartition(tp.topic, tp.partition): OffsetAndMetadata(offset, "", -1)
        for tp, offset in offsets.items()
    }


def _make_listener(src: KafkaSource, consumer: KafkaConsumer) -> Any:
    from kafka import AsyncConsumerRebalanceListener

    class Listener(AsyncConsumerRebalanceListener):  # type: ignore[misc]  # untyped library
        async def on_partitions_revoked(self, revoked: Any) -> None:
            tps = [Partition(p.topic, p.partition) for p in revoked]
            targets = src._commit_targets(tps)
            if targets:
                try:
                    await consumer.commit_async(_kafka_python_offsets(targets))
                    src._mark_committed(targets)
                except Exception as exc:
                    log.warning(
                        "kafka(kafka-python): commit on revoke of %s failed: %s",
                        describe(targets),
                        exc,
                    )
            src._partitions_revoked(tps)

        async def on_partitions_assigned(self, assigned: Any) -> None:
            src._partitions_assigned([(p.topic, p.partition) for p in assigned])

        async def on_partitions_lost(self, lost: Any) -> None:
            # evicted: the partitions may already be someone else's; committing would fail
            src._partitions_revoked([(p.topic, p.partition) for p in lost], lost=True)

    return Listener()
