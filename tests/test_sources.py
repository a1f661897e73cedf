"""Sources as components: each is built from its settings (and reports their problems),
started with the sink it is handed (the pipeline in the service), hands its records only to
that sink, reports its health and stops."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgpack
import pytest

from service.config import ForwardSettings, KafkaSettings
from service.records import LogRecord
from service.sources.base import Source, SourceHealth, SourceSettingsError
from service.sources.forward.factory import ForwardSource, forward_source
from service.sources.http.endpoint import http_sources
from service.sources.kafka.confluent import ConfluentKafkaSource
from service.sources.kafka.factory import KafkaConsumerSource, kafka_source
from service.sources.kafka.kafka_python import KafkaSource
from service.sources.kafka.partition import Partition
from service.sources.kafka.rebalance import RebalanceSink
from tests.ingest_samples import ROUTES


class FakeSink:
    """Records every call the way the pipeline would receive it (the Pipeline is checked
    against the Sink protocol where service.app hands it to the sources)."""

    def __init__(self) -> None:
        self.submitted: list[tuple[list[str], str, str | None]] = []
        self.processed: list[tuple[list[str], str]] = []
        self.revoked: list[Any] = []
        self.assigned: list[Any] = []

    async def submit(
        self, records: list[LogRecord], source: str, chunk_id: str | None = None
    ) -> bool:
        self.submitted.append(([r.text for r in records], source, chunk_id))
        return True

    def process(self, records: list[LogRecord], source: str) -> None:
        self.processed.append(([r.text for r in records], source))

    def on_partitions_revoked(self, partitions: Iterable[Any]) -> None:
        self.revoked.append(list(partitions))

    def on_partitions_assigned(self, partitions: Iterable[Any]) -> None:
        self.assigned.append(list(partitions))


def test_a_source_that_is_off_is_not_built() -> None:
    assert forward_source(None) is None
    assert kafka_source(None) is None


def test_every_source_offers_the_same_lifecycle() -> None:
    sources: list[Source] = [
        ForwardSource(ForwardSettings(port=0)),
        KafkaConsumerSource(KafkaSettings()),
        *http_sources(True),
    ]
    assert [s.source for s in sources] == ["forward", "kafka", "http", "otlp"]
    assert not any(s.health().running for s in sources)  # built, not started


def test_the_forward_source_acks_chunks_and_hands_them_to_the_sink() -> None:
    sink = FakeSink()
    source = forward_source(ForwardSettings(port=0))
    assert isinstance(source, ForwardSource)

    async def main() -> tuple[Any, SourceHealth, SourceHealth]:
        assert source.health().running is False
        await source.start(sink)
        port = source.server.port
        up = source.health()
        assert up.detail["address"] == f"127.0.0.1:{port}"
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(msgpack.packb(["tag", [[1, {"log": ROUTES}]], {"chunk": "c1"}]))
        await writer.drain()
        ack = msgpack.unpackb(await asyncio.wait_for(reader.read(100), 3))
        writer.close()
        await source.stop()
        return ack, up, source.health()

    ack, up, down = asyncio.run(main())
    assert ack == {"ack": "c1"}
    assert sink.submitted == [([ROUTES], "forward", "forward:c1")]
    assert up.source == "forward" and up.running
    assert up.detail["connections"] == 0 and up.detail["held_lines"] == 0
    assert not down.running


def test_a_forward_certificate_that_cannot_be_loaded_names_the_settings(
    tmp_path: Path,
) -> None:
    missing = str(tmp_path / "missing.pem")
    with pytest.raises(SourceSettingsError) as err:
        forward_source(ForwardSettings(tls_cert=missing, tls_key=missing))
    [problem] = err.value.problems
    assert problem.startswith("sources.forward.tls_cert / tls_key: cannot load: ")


def test_kafka_settings_without_a_topic_name_the_setting() -> None:
    with pytest.raises(SourceSettingsError) as err:
        kafka_source(KafkaSettings(topics=[]))
    assert err.value.problems == ["sources.kafka.topics: no topic to read"]


class PlainSink:
    """A sink without the rebalance hooks."""

    def __init__(self) -> None:
        self.processed: list[tuple[list[str], str]] = []

    async def submit(
        self, records: list[LogRecord], source: str, chunk_id: str | None = None
    ) -> bool:
        return True

    def process(self, records: list[LogRecord], source: str) -> None:
        self.processed.append(([r.text for r in records], source))


@pytest.mark.parametrize(
    ("client", "backend"),
    [("kafka-python", KafkaSource), ("confluent-kafka", ConfluentKafkaSource)],
)
def test_the_kafka_source_hands_batches_and_rebalances_to_the_sink(
    client: str, backend: type, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backend, "start", lambda self: None)  # no broker: not consuming
    sink = FakeSink()
    source = kafka_source(KafkaSettings(client=client, format="raw"))
    assert source is not None
    assert source.health() == SourceHealth("kafka", False, {"client": client, "assigned": []})
    asyncio.run(source.start(sink))
    consumer = source.consumer
    assert isinstance(consumer, backend)
    record = LogRecord(stream="s", text=ROUTES)
    consumer.handler([record])
    assert sink.processed == [([ROUTES], "kafka")]
    consumer._partitions_assigned([("t", 0), ("t", 1)])  # as the client's callback does
    assert sink.assigned == [[Partition("t", 0), Partition("t", 1)]]
    health = source.health()
    assert health == SourceHealth("kafka", False, {"client": client, "assigned": ["t:0", "t:1"]})
    consumer._partitions_revoked([("t", 0)])
    assert sink.revoked == [[Partition("t", 0)]]
    assert source.health().detail["assigned"] == ["t:1"]
    assert consumer.fmt == "raw"
    asyncio.run(source.stop())


def test_a_sink_without_rebalance_hooks_gets_only_the_batches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(KafkaSource, "start", lambda self: None)
    sink = PlainSink()
    assert isinstance(FakeSink(), RebalanceSink) and not isinstance(sink, RebalanceSink)
    source = KafkaConsumerSource(KafkaSettings())
    asyncio.run(source.start(sink))
    assert source.consumer is not None and source.consumer.on_revoked is None
    source.consumer.handler([LogRecord(stream="s", text=ROUTES)])
    assert sink.processed == [([ROUTES], "kafka")]
