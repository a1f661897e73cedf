"""Records in, durable effects out: classify a batch and commit everything it changed in one
store transaction (at-least-once input, idempotent effects).

* Kafka (and other positioned sources): a record whose offset is not above the applied
  offset of its (source, partition) is skipped, so re-consumption after a crash never counts
  a line twice; positions advance by compare-and-set in the same transaction as the stream
  snapshots, incidents and outbox events, so a zombie consumer's batch is refused whole.
* Forward / HTTP: :meth:`Pipeline.submit` runs on one worker thread and returns once the
  batch is committed (ack-after-store); a chunk id committed before is acknowledged without
  reprocessing.

Whenever a commit fails, the in-memory state of the streams it touched is dropped so the
next record reloads them from the store (memory never runs ahead of the database).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from service import metrics
from service.classify.engine import Classifier
from service.classify.incident import Change, Incident
from service.classify.stream_state import STARTING, StreamState
from service.records import LogRecord
from service.store import (
    BatchEffects,
    DuplicateChunk,
    IncidentWrite,
    PositionAdvance,
    StaleBatch,
    Store,
    collapse_kinds,
)

log = logging.getLogger("vllm_sentinel.pipeline")
STALE_RETRIES = 3
MAX_STORED_LINE = 8192  # characters of one log line kept in the store
QUARANTINE_TEXT_CAP = 65_536  # characters of a quarantined record kept for inspection
QUARANTINE_LOG_EVERY_S = 60.0  # at most one log line per interval (the rest are counted)


class RouterLike(Protocol):
    def wants(self, incident: dict[str, Any], kind: str) -> bool: ...


def parse_position(position: str | None) -> tuple[str, int] | None:
    """``kafka:topic:3:1234#2`` → (``topic:3``, 1234); ``file:path:12`` → (``path``, 12);
    None when there is no integer offset."""
    if not position:
        return None
    _, _, rest = position.partition(":")
    partition, _, offset = rest.split("#", 1)[0].rpartition(":")
    if not partition or not offset.isdigit():
        return None
    return partition, int(offset)


def partition_name(p: Any) -> str:
    """``topic:partition`` from a string, a (topic, partition) tuple or a client's
    TopicPartition (``.topic`` / ``.partition``)."""
    if isinstance(p, str):
        return p
    if isinstance(p, tuple | list) and len(p) == 2:
        return f"{p[0]}:{p[1]}"
    return f"{p.topic}:{p.partition}"


def _cap(text: Any) -> Any:
    if isinstance(text, str) and len(text) > MAX_STORED_LINE:
        return text[: MAX_STORED_LINE - 1] + "…"
    return text


def bounded_incident(d: dict[str, Any]) -> dict[str, Any]:
    """An incident dict (``to_dict`` or ``summary``) with every stored line cut to
    ``MAX_STORED_LINE`` (a 1 MiB line would otherwise be rewritten with every snapshot).
    Returns a copy; the in-memory incident keeps its lines."""
    d = dict(d)
    if isinstance(d.get("primary"), dict):
        d["primary"] = {**d["primary"], "line": _cap(d["primary"].get("line"))}
    if "line" in d:
        d["line"] = _cap(d["line"])
    d["evidence"] = [_cap(x) for x in d.get("evidence", [])]
    d["related"] = [{**r, "line": _cap(r.get("line"))} for r in d.get("related", [])]
    return d


def bounded_state(d: dict[str, Any]) -> dict[str, Any]:
    d["last_line"] = _cap(d.get("last_line"))
    d["incidents"] = [bounded_incident(i) for i in d.get("incidents", [])]
    return d


class Pipeline:
    """Thread-safe (one batch at a time); the classifier is owned by the pipeline."""

    def __init__(
        self,
        store: Store,
        classifier: Classifier | Callable[..., Classifier],
        router: RouterLike | None = None,
        clock: Callable[[], float] = time.time,
        *,
        on_commit: Callable[[], None] | None = None,
        max_streams: int = 50_000,
        idle_evict_s: float = 3600.0,
    ) -> None:
        self.store = store
        self.router = router
        self.clock = clock
        self.on_commit = on_commit
        self.max_streams = max_streams
        self.idle_evict_s = idle_evict_s
        if isinstance(classifier, Classifier):
            self.classifier = classifier
            if self.classifier.state_loader is None:
                self.classifier.state_loader = self._load_state
        else:
            self.classifier = classifier(state_loader=self._load_state)
        # a stream still starting with nothing open stays until its stall could fire
        self._startup_hold_s = max(self.classifier.stall_deadlines.values(), default=0.0)
        self._lock = threading.RLock()
        self._applied: dict[tuple[str, str], int | None] = {}  # cache of the store's offsets
        self._partitions: dict[str, set[str]] = {}  # stream → partitions its records came from
        # streams in memory, least recently touched first → monotonic time of the last touch
        self._recent: OrderedDict[str, float] = OrderedDict()
        # stream → version of its stored snapshot that the in-memory state continues (None:
        # not stored yet); commits compare-and-set it, so two replicas fed the same stream
        # (forward / HTTP behind a load balancer) never overwrite each other's snapshot
        self._versions: dict[str, int | None] = {}
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pipeline")
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
        self._run(records, source, None)

    async def submit(
        self, records: list[LogRecord], source: str, chunk_id: str | None = None
    ) -> bool:
        """Forward / HTTP sources: returns once the batch is durable (then ack); False when
        ``chunk_id`` was committed before (nothing applied: a resent chunk)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._worker, self._run, records, source, chunk_id)

    def close(self) -> None:
        self._worker.shutdown(wait=True)

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
            self._commit(self._effects(touched, changed, {}, "", None), touched, {}, "")
            return len(changes)

    # ---- Kafka hooks -----------------------------------------------------------------
    def forget(self, stream_keys: Iterable[str]) -> None:
        """Drop in-memory state of these streams (the store's snapshot is reloaded)."""
        with self._lock:
            keys = set(stream_keys)
            self.classifier.forget(keys)  # also drops pending frame refinements
            for k in keys:
                self._partitions.pop(k, None)
                self._recent.pop(k, None)
                self._versions.pop(k, None)

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
            self.forget([s for s, parts in self._partitions.items() if parts & names])

    # ---- core ------------------------------------------------------------------------
    def _load_state(self, key: str) -> StreamState | None:
        snap, version = self.store.load_stream_versioned(key)
        self._versions[key] = version
        return StreamState.from_dict(snap) if snap else None

    def _run(self, records: list[LogRecord], source: str, chunk_id: str | None) -> bool:
        """Whether the batch was applied (False: its chunk id was committed before)."""
        with self._lock:
            if chunk_id is not None and self.store.chunk_seen(chunk_id):
                self.counters["duplicate_chunks"] += 1
                return False
            for attempt in range(STALE_RETRIES + 1):
                try:
                    return self._batch(records, source, chunk_id)
                except StaleBatch as exc:
                    self.counters["stale"] += 1
                    if attempt == STALE_RETRIES:
                        raise
                    log.warning("batch refused (%s); reloading state and retrying", exc)
            raise AssertionError("unreachable")

    def _batch(self, records: list[LogRecord], source: str, chunk_id: str | None) -> bool:
        fresh: list[LogRecord] = []
        advance: dict[str, int] = {}
        for rec in records:
            pos = parse_position(rec.position)
            if pos is not None:
                part, offset = pos
                applied = self._applied_position(source, part)
                if applied is not None and offset <= applied:
                    self.counters["skipped"] += 1
                    continue
                if offset > advance.get(part, -1):
                    advance[part] = offset
                self._partitions.setdefault(rec.stream, set()).add(part)
            fresh.append(rec)
        touched: dict[str, None] = {}
        changed: dict[str, tuple[Incident, list[str]]] = {}
        quarantined: list[dict[str, Any]] = []
        for rec in fresh:
            try:
                found = self.classifier.feed(rec)  # (a pod-only Kubernetes record is re-keyed)
            except Exception as exc:  # noqa: BLE001 - one poison record never stops the flow
                touched[rec.stream] = None
                quarantined.append(self._quarantine(rec, source, exc))
                continue
            touched[rec.stream] = None
            self._collect(found, changed, touched)
        eff = self._effects(touched, changed, advance, source, chunk_id)
        eff.quarantined = quarantined
        if not eff:
            return True
        if not self._commit(eff, touched, advance, source):
            return False
        self.counters["records"] += len(fresh)
        return True

    def _quarantine(self, rec: LogRecord, source: str, exc: Exception) -> dict[str, Any]:
        """The row that keeps a record whose classification raised (committed with the batch,
        so its position advances and it is never re-read)."""
        metrics.QUARANTINED.labels(source=source).inc()
        self.counters["quarantined"] += 1
        now = time.monotonic()
        if now - self._quarantine_logged >= QUARANTINE_LOG_EVERY_S:
            log.error(
                "quarantined a record of stream %.120s (%s: %.200s); %d quarantined so "
                "far, see GET /quarantine",
                rec.stream,
                type(exc).__name__,
                exc,
                self.counters["quarantined"],
                exc_info=exc,
            )
            self._quarantine_logged = now
        text = rec.text if isinstance(rec.text, str) else str(rec.text)
        return {
            "source": source[:64],
            "stream": rec.stream[:1024],
            "position": rec.position,
            "reason": type(exc).__name__[:64],
            "error": str(exc)[:2000],
            "text": text[:QUARANTINE_TEXT_CAP],
            "length": len(text),
        }

    def _effects(
        self,
        touched: dict[str, None],
        changed: dict[str, tuple[Incident, list[str]]],
        advance: dict[str, int],
        source: str,
        chunk_id: str | None,
    ) -> BatchEffects:
        return BatchEffects(
            streams={k: bounded_state(self.classifier.state(k).to_dict()) for k in touched},
            incidents=[self._write(inc, kinds) for inc, kinds in changed.values()],
            positions=[
                PositionAdvance(source, part, self._applied[(source, part)], off)
                for part, off in advance.items()
            ],
            chunk_id=chunk_id,
            at=self.clock(),
            stream_versions={k: self._versions[k] for k in touched if k in self._versions},
        )

    def _commit(
        self, eff: BatchEffects, touched: dict[str, None], advance: dict[str, int], source: str
    ) -> bool:
        """Commit ``eff``; False when the chunk was applied already (nothing written)."""
        started = time.perf_counter()
        try:
            self.store.commit_batch(eff)
        except DuplicateChunk:
            self.counters["duplicate_chunks"] += 1
            self._rollback(touched, advance, source)
            return False
        except BaseException:
            self._rollback(touched, advance, source)
            raise
        self.last_commit_s = time.perf_counter() - started
        for k in eff.streams:
            if k in self._versions:
                self._versions[k] = (self._versions[k] or 0) + 1
        for part, off in advance.items():
            self._applied[(source, part)] = off
        self._drop_resolved(eff.skipped_incidents)
        self.counters["batches"] += 1
        self._evict(touched)
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

    def _write(self, inc: Incident, kinds: list[str]) -> IncidentWrite:
        body = bounded_incident(inc.to_dict())
        notifiable = collapse_kinds(kinds)
        notify = self.router is None or any(self.router.wants(body, k) for k in notifiable)
        return IncidentWrite(
            body=body, summary=bounded_incident(inc.summary()), kinds=notifiable, notify=notify
        )

    def _applied_position(self, source: str, part: str) -> int | None:
        key = (source, part)
        if key not in self._applied:
            self._applied[key] = self.store.applied_position(source, part)
        return self._applied[key]

    def _rollback(self, touched: dict[str, None], advance: dict[str, int], source: str) -> None:
        """Nothing was written: memory must not run ahead of the store."""
        self.forget(touched)
        for part in advance:
            self._applied.pop((source, part), None)

    def _drop_resolved(self, ids: set[str]) -> None:
        """Incidents resolved by hand in the store leave the in-memory streams too."""
        if not ids:
            return
        for st in self.classifier.streams.values():
            st.incidents = [i for i in st.incidents if i.id not in ids]

    def _evict(self, touched: dict[str, None]) -> None:
        now = time.monotonic()
        for k in touched:
            self._recent[k] = now
            self._recent.move_to_end(k)
        while len(self._recent) > self.max_streams:
            key, _ = self._recent.popitem(last=False)
            self._drop_stream(key)

    def evict_idle(self, now: float | None = None) -> int:
        """Forget the streams no line touched for ``idle_evict_s`` (their snapshot is in the
        store and is reloaded by their next line); a stream still starting with nothing
        open is kept until its stall deadline could have passed. Returns how many went."""
        now = time.monotonic() if now is None else now
        gone = 0
        with self._lock:
            for key, touched in list(self._recent.items()):
                idle = now - touched
                if idle < self.idle_evict_s:
                    break  # least recently touched first: the rest are younger
                st = self.classifier.streams.get(key)
                if (
                    st is not None
                    and st.status == STARTING
                    and st.current() is None
                    and idle < self.idle_evict_s + self._startup_hold_s
                ):
                    continue
                del self._recent[key]
                self._drop_stream(key)
                gone += 1
        self.counters["evicted"] += gone
        return gone

    def _drop_stream(self, key: str) -> None:
        self.classifier.forget([key])
        self._partitions.pop(key, None)
        self._versions.pop(key, None)
