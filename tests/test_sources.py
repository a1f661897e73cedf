"""Sources as components: each is built from its settings and the sink it is handed (the
pipeline in the service), hands its records only to that sink, and reports its health."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgpack
import pytest

from service.config import ForwardSettings, KafkaSettings
from service.records import LogRecord
from service.sources.base import SourceHealth, SourceSettingsError
from service.sources.forward.factory import forward_source
from service.sources.forward.server import ForwardServer
from service.sources.kafka.confluent import ConfluentKafkaSource
from service.sources.kafka.factory import kafka_source
from service.sources.kafka.kafka_python import KafkaSource
from service.sources.kafka.partition import Partition
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
    assert forward_source(None, FakeSink()) is None
    assert kafka_source(None, FakeSink()) is None


def test_the_forward_source_acks_chunks_and_hands_them_to_the_sink() -> None:
    sink = FakeSink()
    server = forward_source(ForwardSettings(port=0), sink)
    assert isinstance(server, ForwardServer)

    async def main() -> tuple[Any, SourceHealth, SourceHealth]:
        assert server.health().running is False
        await server.start()
        up = server.health()
        assert up.detail["address"] == f"127.0.0.1:{server.port}"
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(msgpack.packb(["tag", [[1, {"log": ROUTES}]], {"chunk": "c1"}]))
        await writer.drain()
        ack = msgpack.unpackb(await asyncio.wait_for(reader.read(100), 3))
        writer.close()
        await server.stop()
        return ack, up, server.health()

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
        forward_source(ForwardSettings(tls_cert=missing, tls_key=missing), FakeSink())
    [problem] = err.value.problems
    assert problem.startswith("sources.forward.tls_cert / tls_key: cannot load: ")


@pytest.mark.parametrize(
    ("client", "backend"),
    [("kafka-python", KafkaSource), ("confluent-kafka", ConfluentKafkaSource)],
)
def test_the_kafka_source_hands_batches_and_rebalances_to_the_sink(
    client: str, backend: type
) -> None:
    sink = FakeSink()
    source = kafka_source(KafkaSettings(client=client, format="raw"), sink)
    assert isinstance(source, backend)
    record = LogRecord(stream="s", text=ROUTES)
    source.handler([record])
    assert sink.processed == [([ROUTES], "kafka")]
    source._partitions_assigned([("t", 0), ("t", 1)])  # as the client's callback does
    assert sink.assigned == [[Partition("t", 0), Partition("t", 1)]]
    health = source.health()
    assert health == SourceHealth("kafka", False, {"client": client, "assigned": ["t:0", "t:1"]})
    source._partitions_revoked([("t", 0)])
    assert sink.revoked == [[Partition("t", 0)]]
    assert source.health().detail["assigned"] == ["t:1"]
    assert source.fmt == "raw"
