"""The consume loop both Kafka client backends share (:class:`KafkaSourceBase`).

Delivery contract (at least once, never skip)::

    poll(max_poll_records) → decode every value (decode_kafka_value; junk is counted as a
    reject and skipped, never raised) → join runtime chunks per partition → handler(batch)
    → commit synchronously, per partition, the next offset to read — only after the
    handler returned.

``handler(records)`` must store the batch durably before it returns and must tolerate
re-delivery (every :class:`LogRecord` carries ``position = kafka:<topic>:<partition>:<offset>``,
a :class:`~service.records.Position`, so already-applied records can be dropped). When it raises, nothing is committed: the
source logs, rewinds every partition of the batch to the first offset not yet durably
handled (= the last committed offset), backs off (exponentially, capped below
``max_poll_interval_ms``) and re-polls the same records. A crash simply restarts from the
last commit. Duplicates happen after a crash, a failed handler or a rebalance; loss does not.
Runtime chunks are joined per partition, and positions never go backwards within one
(:mod:`service.sources.kafka.partition`).

Rebalances: ``on_partitions_revoked`` commits what is done for the revoked partitions, drops
their joiners and then calls ``on_revoked(partitions)``; ``on_partitions_assigned`` calls
``on_assigned(partitions)`` (reset per-stream state there: the new owner re-reads from the
last commit). Partitions are :class:`~service.sources.kafka.partition.Partition`
``(topic, partition)`` tuples. Both callbacks run while the consuming thread is inside
``poll``/``close`` (never concurrently with the handler) and must be quick: kafka-python 3.0
runs them on its network thread, which also sends the heartbeats.

A backend implements the six client calls at the end of the class (open, poll, commit,
seek, end offset, close); the settings they read are described in
:mod:`service.sources.kafka.client_config`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any

from service import metrics, ratelog
from service.config import KafkaSettings
from service.ingest.envelope import MAX_LINE, Format
from service.ingest.joiner import Joiner
from service.ingest.lines import PARTIAL
from service.records import LogRecord, Position
from service.sources.base import SourceHealth
from service.sources.kafka.partition import Partition, PartitionState, describe, names
from service.sources.kafka.value import decode_kafka_value

log = logging.getLogger(__name__)

Handler = Callable[[list[LogRecord]], None]
PartitionCallback = Callable[[list[Partition]], None]
# (topic, partition, offset, key, value) of one message
Message = tuple[str, int, int, bytes | None, bytes | None]


class _Restart(Exception):
    """The consumer is in a state only a fresh consumer can leave (e.g. a seek failed)."""


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
        self._parts: dict[Partition, PartitionState] = {}
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

    def health(self) -> SourceHealth:
        """Running or not, the client, and the partitions owned now (``topic:partition``)."""
        assigned = sorted(f"{tp.topic}:{tp.partition}" for tp in self._assigned)
        return SourceHealth(
            self.source, self.running, {"client": self.client_name, "assigned": assigned}
        )

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
                            describe(marks),
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
                at = Position("kafka", f"{topic}:{partition}", offset)
                ratelog.reject(source, "decode_error", f"{at} {exc!r}")
                records = []
            ps.next = offset + 1
            if not join:
                out.extend(records)
                continue
            if ps.held:
                at = Position("kafka", f"{topic}:{partition}", offset)
                ps.release_idle(self.join_idle_s, at, out)
            for rec in records:
                if ps.held or rec.meta.get(PARTIAL):
                    ps.push(rec, offset, out)
                else:
                    out.append(rec)  # the joiner holds nothing of this partition
        return out, marks

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
                "kafka(%s): commit of %s failed: %s", self.client_name, describe(targets), exc
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
            ps.rewind(offset, self._new_joiner())
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

    def _new_state(self) -> PartitionState:
        return PartitionState(self._new_joiner())

    # ------------------------------------------------------------------ rebalance

    def _partitions_assigned(self, partitions: Iterable[Any]) -> None:
        tps = sorted(Partition(p[0], p[1]) for p in partitions)
        for tp in tps:
            self._parts[tp] = self._new_state()
        self._assigned = self._assigned | frozenset(tps)
        log.info("kafka(%s): assigned %s", self.client_name, names(tps))
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
        log.info("kafka(%s): %s %s", self.client_name, "lost" if lost else "revoked", names(tps))
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
