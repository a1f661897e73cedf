"""Records in, durable effects out: classify a batch and commit everything it changed in one
store transaction (at-least-once input, idempotent effects).

* Kafka (and other positioned sources): a record whose offset (its
  :class:`~service.records.Position`) is not above the applied offset of its (source,
  partition) is skipped, so re-consumption after a crash never counts a line twice; positions
  advance by compare-and-set in the same transaction as the stream snapshots, incidents and
  outbox events, so a zombie consumer's batch is refused whole.
* Forward / HTTP: :meth:`Pipeline.submit` returns once the batch is committed
  (ack-after-store); a chunk id committed before is acknowledged without reprocessing.
* Every batch (Kafka's too) is cut into slices run by one worker, the least-used streams'
  first (:mod:`service.fairshare`): a flood on one stream never holds another's line back by
  more than a slice. Each slice is its own transaction; a batch's chunk id is its last
  slice's, the others' ``<chunk id>#<n>`` (the same cut of a resent batch skips each slice
  already committed).

Every stream's state is the classifier's :class:`~service.classify.tracker.StreamTracker`'s:
the pipeline hands it the store to load from (:class:`StorePersistence`) and writes what it
says a batch changed (stream snapshots, workloads, novelty templates) in the batch's
transaction. Whenever a commit fails, the tracker drops the state of the streams it touched
so the next record reloads them from the store (memory never runs ahead of the database).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from service import metrics
from service.classify.engine import Classifier
from service.classify.tracker import Saves
from service.fairshare import FairShare, Part, slices
from service.incidents.bounded import bounded_body, bounded_state, bounded_summary
from service.incidents.incident import Change, Incident
from service.incidents.incident_json import IncidentBody
from service.incidents.snapshots import NoveltySnapshot, StreamSnapshot, Versioned
from service.incidents.workload import WorkloadSnapshot
from service.records import LogRecord, Position
from service.store import Store
from service.store import effects as fx

log = logging.getLogger("vllm_sentinel.pipeline")
STALE_RETRIES = 3
QUARANTINE_TEXT_CAP = 65_536  # characters of a quarantined record kept for inspection
QUARANTINE_LOG_EVERY_S = 60.0  # at most one log line per interval (the rest are counted)


class RouterLike(Protocol):
    def wants(self, incident: IncidentBody, kind: str) -> bool: ...


def partition_name(p: Any) -> str:
    """``topic:partition`` from a string, a (topic, partition) tuple or a client's
    TopicPartition (``.topic`` / ``.partition``)."""
    if isinstance(p, str):
        return p
    if isinstance(p, tuple | list) and len(p) == 2:
        return f"{p[0]}:{p[1]}"
    return f"{p.topic}:{p.partition}"


class StorePersistence:
    """The stream tracker's :class:`~service.classify.tracker.Persistence` over the store:
    stream snapshots, workloads and the novelty templates as the batches wrote them."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def load_stream(self, key: str) -> Versioned[StreamSnapshot] | None:
        state, version = self.store.load_stream_versioned(key)
        return None if state is None else Versioned(state, version or 0)

    def load_workload(self, key: str) -> Versioned[WorkloadSnapshot] | None:
        state, version = self.store.load_workload_versioned(key)
        return None if state is None else Versioned(state, version or 0)

    def load_novelty(self) -> NoveltySnapshot | None:
        return self.store.load_novelty()


class Pipeline:
    """Thread-safe (one batch at a time); the classifier (and its stream tracker) is owned
    by the pipeline."""

    def __init__(
        self,
        store: Store,
        classifier: Classifier,
        router: RouterLike | None = None,
        clock: Callable[[], float] = time.time,
        *,
        on_commit: Callable[[], None] | None = None,
        max_streams: int = 50_000,
        idle_evict_s: float = 3600.0,
    ) -> None:
        """``max_streams`` / ``idle_evict_s``: the streams kept in memory (the settings'
        ``streams``); a stream still starting stays until its stall could fire."""
        self.store = store
        self.router = router
        self.clock = clock
        self.on_commit = on_commit
        self.classifier = classifier
        self.tracker = classifier.tracker
        self.tracker.attach(
            StorePersistence(store),
            max_streams=max_streams,
            idle_evict_s=idle_evict_s,
            startup_hold_s=max(classifier.stall_deadlines.values(), default=0.0),
        )
        self._lock = threading.RLock()
        self._applied: dict[tuple[str, str], int | None] = {}  # cache of the store's offsets
        self._worker: FairShare[bool] = FairShare("pipeline")
        self.counters = {
            "batches": 0,
            "records": 0,
            "skipped": 0,
            "duplicate_chunks": 0,
            "stale": 0,
            "quarantined": 0,
            "evicted": 0,
        }
        self._quarantine_logged = float("-inf")
        self.last_commit_s = 0.0

    # ---- input -----------------------------------------------------------------------
    def process(self, records: list[LogRecord], source: str) -> None:
        """Classify and commit one batch (synchronous; returns once durable)."""
        self._worker.submit(self._lanes(records, source, None)).result()

    async def submit(
        self, records: list[LogRecord], source: str, chunk_id: str | None = None
    ) -> bool:
        """Forward / HTTP sources: returns once the batch is durable (then ack); False when
        ``chunk_id`` was committed before (nothing applied: a resent chunk)."""
        done = self._worker.submit(self._lanes(records, source, chunk_id))
        applied: list[bool] = await asyncio.wrap_future(done)
        return any(applied)

    def close(self) -> None:
        self._worker.close()

    def _lanes(
        self, records: list[LogRecord], source: str, chunk_id: str | None
    ) -> list[list[Part[bool]]]:
        """The batch as the worker's lanes of slices (:func:`service.fairshare.slices`); the
        last slice carries ``chunk_id``, the others ``<chunk_id>#<n>``."""
        lanes = slices(records) if records else [[records]]  # (an empty batch: its chunk id)
        n = sum(len(lane) for lane in lanes)
        ids = iter(range(n))
        out = []
        for lane in lanes:
            parts = []
            for cut in lane:
                i = next(ids)
                cid = chunk_id if chunk_id is None or i == n - 1 else f"{chunk_id}#{i}"
                run = functools.partial(self._run, cut, source, cid)
                flows = tuple(dict.fromkeys(r.stream for r in cut))
                parts.append(Part(run, flows, len(cut), source))
            out.append(parts)
        return out

    def tick(self, now: float | None = None) -> int:
        """Timer checks (stalls) on the streams in memory; commits what they opened.
        Returns the number of incident changes."""
        with self._lock:
            changes = self.classifier.tick(self.clock() if now is None else now)
            self.evict_idle()
            if not changes:
                return 0
            touched: dict[str, None] = {}
            changed: dict[str, tuple[Incident, list[str]]] = {}
            self._collect(changes, changed, touched)
            eff, saves = self._effects(touched, changed, {}, "", None)
            self._commit(eff, saves, touched, {}, "")
            return len(changes)

    # ---- Kafka hooks -----------------------------------------------------------------
    def forget(self, stream_keys: Iterable[str]) -> None:
        """Drop in-memory state of these streams (the store's snapshot is reloaded)."""
        with self._lock:
            self.tracker.forget(stream_keys)  # also drops pending frame refinements

    def on_partitions_revoked(self, partitions: Iterable[Any]) -> None:
        """Another consumer will own these: forget their streams and cached offsets."""
        self._drop_partitions({partition_name(p) for p in partitions})

    def on_partitions_assigned(self, partitions: Iterable[Any]) -> None:
        """Newly owned: whatever we remember of them may be stale; reload from the store."""
        self._drop_partitions({partition_name(p) for p in partitions})

    def _drop_partitions(self, names: set[str]) -> None:
        with self._lock:
            for key in [k for k in self._applied if k[1] in names]:
                del self._applied[key]
            self.forget(self.tracker.streams_from(names))

    # ---- core ------------------------------------------------------------------------
    def _run(self, records: list[LogRecord], source: str, chunk_id: str | None) -> bool:
        """Whether the batch was applied (False: its chunk id was committed before)."""
        with self._lock:
            if chunk_id is not None and self.store.chunk_seen(chunk_id):
                self.counters["duplicate_chunks"] += 1
                return False
            for attempt in range(STALE_RETRIES + 1):
                try:
                    return self._batch(records, source, chunk_id)
                except fx.StaleBatch as exc:
                    self.counters["stale"] += 1
                    if attempt == STALE_RETRIES:
                        raise
                    log.warning("batch refused (%s); reloading state and retrying", exc)
            raise AssertionError("unreachable")

    def _batch(self, records: list[LogRecord], source: str, chunk_id: str | None) -> bool:
        fresh: list[LogRecord] = []
        advance: dict[str, int] = {}
        for rec in records:
            pos = rec.position
            if pos is not None:  # kept per (source of the batch, partition)
                part, offset = pos.partition, pos.offset
                applied = self._applied_position(source, part)
                if applied is not None and offset <= applied:
                    self.counters["skipped"] += 1
                    continue
                if offset > advance.get(part, -1):
                    advance[part] = offset
                self.tracker.came_from(rec.stream, part)
            fresh.append(rec)
        touched: dict[str, None] = {}
        changed: dict[str, tuple[Incident, list[str]]] = {}
        quarantined: list[fx.QuarantineRecord] = []
        for rec in fresh:
            try:
                found = self.classifier.feed(rec)  # (a pod-only Kubernetes record is re-keyed)
            except Exception as exc:  # noqa: BLE001 - one poison record never stops the flow
                touched[rec.stream] = None
                quarantined.append(self._quarantine(rec, source, exc))
                continue
            touched[rec.stream] = None
            self._collect(found, changed, touched)
        eff, saves = self._effects(touched, changed, advance, source, chunk_id)
        eff.quarantined = quarantined
        if not eff:
            return True
        if not self._commit(eff, saves, touched, advance, source):
            return False
        self.counters["records"] += len(fresh)
        return True

    def _quarantine(self, rec: LogRecord, source: str, exc: Exception) -> fx.QuarantineRecord:
        """The row that keeps a record whose classification raised (committed with the batch,
        so its position advances and it is never re-read)."""
        metrics.QUARANTINED.labels(source=source).inc()
        self.counters["quarantined"] += 1
        # the door redacts in place; a record that failed before it is redacted here, and
        # the error (which may quote the line) too: the log gets no traceback for that reason
        redact = self.classifier.rules.redactor.redact
        raw = rec.text if isinstance(rec.text, str) else str(rec.text)
        text = redact(raw, counted=False)  # (cut at the door's 8,192 characters)
        error = redact(str(exc)[:2000], counted=False)
        now = time.monotonic()
        if now - self._quarantine_logged >= QUARANTINE_LOG_EVERY_S:
            log.error(
                "quarantined a record of stream %.120s (%s: %.200s); %d quarantined so "
                "far, see GET /quarantine",
                rec.stream,
                type(exc).__name__,
                error,
                self.counters["quarantined"],
            )
            self._quarantine_logged = now
        return {
            "source": source[:64],
            "stream": rec.stream[:1024],
            "position": None if rec.position is None else str(rec.position),
            "reason": type(exc).__name__[:64],
            "error": error,
            "text": text[:QUARANTINE_TEXT_CAP],
            "length": len(raw),
        }

    def _effects(
        self,
        touched: dict[str, None],
        changed: dict[str, tuple[Incident, list[str]]],
        advance: dict[str, int],
        source: str,
        chunk_id: str | None,
    ) -> tuple[fx.BatchEffects, Saves]:
        """What the batch writes, and the tracker's saves it holds."""
        saves = self.tracker.snapshots(touched)
        eff = fx.BatchEffects(
            streams={k: bounded_state(v) for k, v in saves.streams.items()},
            incidents=[self._write(inc, kinds) for inc, kinds in changed.values()],
            positions=[
                fx.PositionAdvance(Position(source, part, off), self._applied[(source, part)])
                for part, off in advance.items()
            ],
            chunk_id=chunk_id,
            at=self.clock(),
            stream_versions=saves.stream_versions,
            workloads=saves.workloads,
            workload_versions=saves.workload_versions,
            novelty=saves.novelty,
        )
        return eff, saves

    def _commit(
        self,
        eff: fx.BatchEffects,
        saves: Saves,
        touched: dict[str, None],
        advance: dict[str, int],
        source: str,
    ) -> bool:
        """Commit ``eff``; False when the chunk was applied already (nothing written)."""
        started = time.perf_counter()
        try:
            self.store.commit_batch(eff)
        except fx.DuplicateChunk:
            self.counters["duplicate_chunks"] += 1
            self._rollback(touched, advance, source)
            return False
        except BaseException:
            self._rollback(touched, advance, source)
            raise
        self.last_commit_s = time.perf_counter() - started
        self.tracker.saved(saves)
        for part, off in advance.items():
            self._applied[(source, part)] = off
        self.tracker.drop_incidents(eff.skipped_incidents)
        self.counters["batches"] += 1
        if self.on_commit is not None and any(w.kinds for w in eff.incidents):
            self.on_commit()
        return True

    @staticmethod
    def _collect(
        changes: list[Change],
        changed: dict[str, tuple[Incident, list[str]]],
        touched: dict[str, None],
    ) -> None:
        """Per incident: its (latest) object and the kinds of change, in order."""
        for ch in changes:
            _, kinds = changed.get(ch.incident.id, (ch.incident, []))
            kinds.append(ch.kind)
            changed[ch.incident.id] = (ch.incident, kinds)
            touched[ch.incident.stream] = None
            for key in ch.also:  # e.g. the pod an incident followed its workload from
                touched[key] = None

    def _write(self, inc: Incident, kinds: list[str]) -> fx.IncidentWrite:
        body = bounded_body(inc.to_dict())
        notifiable = fx.collapse_kinds(kinds)
        notify = self.router is None or any(self.router.wants(body, k) for k in notifiable)
        return fx.IncidentWrite(
            body=body, summary=bounded_summary(inc.summary()), kinds=notifiable, notify=notify
        )

    def _applied_position(self, source: str, part: str) -> int | None:
        key = (source, part)
        if key not in self._applied:
            self._applied[key] = self.store.applied_position(source, part)
        return self._applied[key]

    def _rollback(self, touched: dict[str, None], advance: dict[str, int], source: str) -> None:
        """Nothing was written: memory must not run ahead of the store."""
        self.tracker.discard_unsaved()
        self.forget(touched)
        for part in advance:
            self._applied.pop((source, part), None)

    def evict_idle(self, now: float | None = None) -> int:
        """Forget the streams no line touched for a while (:meth:`StreamTracker.evict_idle`:
        their snapshot is in the store and is reloaded by their next line). Returns how many
        went."""
        with self._lock:
            gone = self.tracker.evict_idle(now)
        self.counters["evicted"] += gone
        return gone
