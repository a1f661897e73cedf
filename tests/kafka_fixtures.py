"""A real Kafka-protocol broker for the integration tests, and helpers to talk to it.

``kafka_bootstrap`` (session): ``$SENTINEL_TEST_KAFKA`` if set; else a broker already
answering at 127.0.0.1:9092 (e.g. ``scripts/tansu.py start``); else a Tansu broker started with
``scripts/tansu.py`` on a free port and stopped after the session. Tests use fresh topic and
group names, so a shared broker is fine. Without a broker or the tansu binary they skip.

Load them in a test module with ``pytest_plugins = ["tests.kafka_fixtures"]``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from service.config import KafkaSettings

ROOT = Path(__file__).resolve().parents[1]
TANSU = ROOT / "scripts" / "tansu.py"

# Fast group membership on Tansu (see service/sources/kafka/client_config.py): join ~1 s, rebalance ~2 s.
SESSION_TIMEOUT_MS = 2000
HEARTBEAT_MS = 500
MAX_POLL_INTERVAL_MS = 5000
CLIENTS = ["kafka-python", "confluent-kafka"]


def _is_kafka(bootstrap: str) -> bool:
    host, _, port = bootstrap.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=0.5):
            pass
    except OSError:
        return False
    from kafka import KafkaConsumer

    try:
        KafkaConsumer(bootstrap_servers=bootstrap, bootstrap_timeout_ms=3000).close()
    except Exception:
        return False
    return True


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    env = os.environ.get("SENTINEL_TEST_KAFKA")
    if env:
        yield env
        return
    if _is_kafka("127.0.0.1:9092"):
        yield "127.0.0.1:9092"
        return
    found = subprocess.run([sys.executable, str(TANSU), "bin"], capture_output=True, text=True)
    if found.returncode != 0:
        pytest.skip(f"no Kafka broker: {found.stderr.strip() or found.stdout.strip()}")
    started = subprocess.run(
        [sys.executable, str(TANSU), "start", "--port", "0", "--exit-with", str(os.getpid())],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if started.returncode != 0:
        pytest.fail(f"tansu did not start: {started.stderr}")
    bootstrap = started.stdout.strip().splitlines()[-1]
    port = bootstrap.rpartition(":")[2]
    try:
        yield bootstrap
    finally:
        subprocess.run(
            [sys.executable, str(TANSU), "stop", "--port", port], capture_output=True, timeout=30
        )


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def create_topic(bootstrap: str, partitions: int = 4, prefix: str = "t") -> str:
    from kafka.admin import KafkaAdminClient, NewTopic

    name = unique(prefix)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()
    return name


def produce(
    bootstrap: str, topic: str, messages: Iterable[tuple[bytes | None, bytes | None, int | None]]
) -> list[tuple[int, int]]:
    """Send ``(key, value, partition)`` messages in order; their ``(partition, offset)``."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    try:
        futures = [producer.send(topic, key=k, value=v, partition=p) for k, v, p in messages]
        producer.flush()
        return [(md.partition, md.offset) for md in (f.get(timeout=30) for f in futures)]
    finally:
        producer.close()


def fast_settings(bootstrap: str, topic: str, client: str, **changes: Any) -> KafkaSettings:
    """Settings with short session/poll timeouts so group joins take about a second."""
    values: dict[str, Any] = {
        "bootstrap": bootstrap,
        "topics": [topic],
        "group": unique("g"),
        "client": client,
        "session_timeout_ms": SESSION_TIMEOUT_MS,
        "max_poll_interval_ms": MAX_POLL_INTERVAL_MS,
        "max_poll_records": 500,
        "extra": {"heartbeat_interval_ms": HEARTBEAT_MS},
    }
    values.update(changes)
    return KafkaSettings(**values)


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int | None]:
    """The group's committed offsets (``None``: nothing committed), read from the broker."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        return {p: consumer.committed(TopicPartition(topic, p)) for p in range(partitions)}
    finally:
        consumer.close(autocommit=False)


def wait_for(predicate: Callable[[], bool], timeout: float = 20.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(0.05)
