"""The confluent-kafka (librdkafka) backend of
:class:`~service.sources.kafka.base.KafkaSourceBase`.

Selected by ``client: confluent-kafka`` (install the ``confluent`` extra). Same contract as the
kafka-python backend: ``enable.auto.commit`` and ``enable.auto.offset.store`` off,
``consume(num_messages=max_poll_records)`` batches, ``commit(offsets=..., asynchronous=False)``
only after the handler returned, ``on_assign`` / ``on_revoke`` / ``on_lost`` callbacks (served
inside ``consume``/``close`` on the consuming thread, so the revoke callback can commit
synchronously). Its librdkafka properties:
:func:`~service.sources.kafka.client_config.confluent_config`.
"""

from __future__ import annotations

import logging
from typing import Any

from service.sources.kafka.base import KafkaSourceBase, Message
from service.sources.kafka.client_config import confluent_config
from service.sources.kafka.partition import Partition, describe

log = logging.getLogger(__name__)


class ConfluentKafkaSource(KafkaSourceBase):
    """confluent-kafka backend; same constructor and behaviour as
    :class:`~service.sources.kafka.kafka_python.KafkaSource`."""

    client_name = "confluent-kafka"
    _consumer: Any = None  # the client's consumer, while connected

    def _open(self) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer(confluent_config(self.settings), logger=log)
        consumer.subscribe(
            list(self.settings.topics),
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        self._consumer = consumer
        log.info(
            "kafka(confluent-kafka): consuming %s as group %s from %s",
            ", ".join(self.settings.topics),
            self.settings.group,
            self.settings.bootstrap,
        )

    # callbacks run inside consume()/close() on this thread
    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        self._partitions_assigned([(p.topic, p.partition) for p in partitions])

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        tps = [Partition(p.topic, p.partition) for p in partitions]
        targets = self._commit_targets(tps)
        if targets:
            try:
                self._commit(targets)
                self._mark_committed(targets)
            except Exception as exc:
                log.warning(
                    "kafka(confluent-kafka): commit on revoke of %s failed: %s",
                    describe(targets),
                    exc,
                )
        self._partitions_revoked(tps)

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        self._partitions_revoked([(p.topic, p.partition) for p in partitions], lost=True)

    def _poll(self, timeout_s: float, max_records: int) -> list[Message]:
        from confluent_kafka import KafkaError, KafkaException

        # consume(n, timeout) waits until n messages or the timeout: at a trickle every
        # batch would sit out the whole timeout (alert latency). Wait for the first message,
        # then take only what is already fetched.
        messages = self._consumer.consume(num_messages=1, timeout=timeout_s)
        if messages and max_records > 1:
            messages += self._consumer.consume(num_messages=max_records - 1, timeout=0)
        out: list[Message] = []
        for m in messages:
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                if err.fatal():
                    raise KafkaException(err)
                log.warning("kafka(confluent-kafka): %s", err)
                continue
            out.append((m.topic(), m.partition(), m.offset(), m.key(), m.value()))
        return out

    def _commit(self, offsets: dict[Partition, int]) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        result = self._consumer.commit(
            offsets=[TopicPartition(tp.topic, tp.partition, off) for tp, off in offsets.items()],
            asynchronous=False,
        )
        errors = [p for p in result or () if p.error is not None]
        if errors:
            raise KafkaException(errors[0].error)

    def _seek(self, tp: Partition, offset: int) -> None:
        from confluent_kafka import TopicPartition

        self._consumer.seek(TopicPartition(tp.topic, tp.partition, offset))

    def _end_offset(self, tp: Partition) -> int | None:
        from confluent_kafka import TopicPartition

        ctp = TopicPartition(tp.topic, tp.partition)
        high: int | None
        _low, high = self._consumer.get_watermark_offsets(ctp, timeout=2.0, cached=True)
        if high is None or high < 0:
            _low, high = self._consumer.get_watermark_offsets(ctp, timeout=2.0)
        return high

    def _close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()  # serves on_revoke (which commits what is done) and leaves
