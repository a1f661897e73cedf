"""Fair shares of the classifier's one worker: no stream's flood delays another stream's line
by more than a slice.

The pipeline (:mod:`service.pipeline`) cuts every batch into **slices** (:func:`slices`): at
most :data:`SLICE_RECORDS` records or :data:`SLICE_CHARS` characters each, one **lane** per
stream when the batch holds no positioned record (a Kafka offset must advance in order) and
no Kubernetes evidence (routed across streams), else one lane in the batch's order. The
:class:`FairShare` worker then runs, one at a time, the head slice of the lane whose streams
used the least of the worker lately (seconds of work, halved every :data:`HALF_LIFE_S`),
oldest first among equals. A stream that floods is slowed (its slices wait while lighter
streams' run), counted in ``sentinel_pipeline_slowed_records_total`` when a slice waited
over :data:`SLOWED_S`, and never dropped: every slice runs, and a batch's caller hears back
once all its slices have.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from service import metrics
from service.records import LogRecord

SLICE_RECORDS = 512  # records of one slice (one transaction)
SLICE_CHARS = 64 * 1024  # characters of one slice: eight 8 KiB lines, ~0.1 s of the worst
HALF_LIFE_S = 10.0  # how fast a stream's past use of the worker is forgotten
SLOWED_S = 1.0  # a slice that waited longer is counted as slowed
MAX_FLOWS = 100_000  # streams whose recent use is remembered (the least used are forgotten)

R = TypeVar("R")


def slices(records: list[LogRecord]) -> list[list[list[LogRecord]]]:
    """``records`` as lanes of slices (see the module docstring); every record once, each
    stream's records in their order."""
    ordered = any(r.position is not None or "kube" in r.meta for r in records)
    if ordered:
        lanes = [records]
    else:
        by_stream: dict[str, list[LogRecord]] = {}
        for r in records:
            by_stream.setdefault(r.stream, []).append(r)
        lanes = list(by_stream.values())
    return [_cut(lane) for lane in lanes]


def _cut(lane: list[LogRecord]) -> list[list[LogRecord]]:
    out: list[list[LogRecord]] = []
    cur: list[LogRecord] = []
    chars = 0
    for r in lane:
        cur.append(r)
        chars += len(r.text)
        if len(cur) >= SLICE_RECORDS or chars >= SLICE_CHARS:
            out.append(cur)
            cur, chars = [], 0
    if cur:
        out.append(cur)
    return out


@dataclass(slots=True)
class Part(Generic[R]):
    """One slice's work: ``run`` it; ``flows``: the streams it belongs to."""

    run: Callable[[], R]
    flows: tuple[str, ...]
    records: int
    source: str = ""
    queued: float = 0.0


@dataclass(slots=True)
class _Job(Generic[R]):
    future: Future[list[R]]
    lanes_left: int
    results: list[R] = field(default_factory=list)
    failed: bool = False


@dataclass(slots=True)
class _Lane(Generic[R]):
    job: _Job[R]
    parts: deque[Part[R]]
    seq: int


class FairShare(Generic[R]):
    """One worker thread running lanes' slices, the least-used streams first."""

    def __init__(self, name: str = "pipeline", clock: Callable[[], float] = time.monotonic):
        self.name = name
        self.clock = clock
        self._heap: list[tuple[float, int, _Lane[R]]] = []
        self._use: dict[str, tuple[float, float]] = {}  # stream → (seconds, as of)
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.queued = 0  # slices waiting

    def submit(self, lanes: Iterable[list[Part[R]]]) -> Future[list[R]]:
        """Run every lane's parts (each lane in order); the future holds their results (in
        no set order) once all ran, or the first exception."""
        future: Future[list[R]] = Future()
        todo = [lane for lane in lanes if lane]
        if not todo:
            future.set_result([])
            return future
        job: _Job[R] = _Job(future, len(todo))
        now = self.clock()
        with self._cond:
            if self._closed:
                raise RuntimeError(f"{self.name}: closed")
            for parts in todo:
                for p in parts:
                    p.queued = now
                lane = _Lane(job, deque(parts), next(self._seq))
                heapq.heappush(self._heap, (self._priority(parts[0].flows, now), lane.seq, lane))
                self.queued += len(parts)
            metrics.PIPELINE_QUEUED.set(self.queued)
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=self.name, daemon=True)
                self._thread.start()
            self._cond.notify()
        return future

    def close(self) -> None:
        """Run what is queued, then stop the worker."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join()

    # ---- the worker --------------------------------------------------------------------
    def _priority(self, flows: tuple[str, ...], now: float) -> float:
        return max((self._used(f, now) for f in flows), default=0.0)

    def _used(self, flow: str, now: float) -> float:
        got = self._use.get(flow)
        if got is None:
            return 0.0
        used, at = got
        return float(used * 0.5 ** ((now - at) / HALF_LIFE_S))

    def _charge(self, flows: tuple[str, ...], seconds: float, now: float) -> None:
        for f in flows:
            self._use[f] = (self._used(f, now) + seconds, now)
        if len(self._use) > MAX_FLOWS:
            keep = sorted(self._use, key=lambda f: self._used(f, now))[-MAX_FLOWS // 2 :]
            self._use = {f: self._use[f] for f in keep}

    def _next(self) -> _Lane[R] | None:
        """The lane to run next (its priority checked afresh), or None once closed and
        empty."""
        with self._cond:
            while not self._heap:
                if self._closed:
                    return None
                self._cond.wait()
            now = self.clock()
            while True:
                _, seq, lane = heapq.heappop(self._heap)
                fresh = self._priority(lane.parts[0].flows, now)
                if not self._heap or fresh <= self._heap[0][0]:
                    return lane
                heapq.heappush(self._heap, (fresh, seq, lane))

    def _work(self) -> None:
        while (lane := self._next()) is not None:
            part = lane.parts.popleft()
            job = lane.job
            started = self.clock()
            if started - part.queued > SLOWED_S:
                metrics.PIPELINE_SLOWED.labels(source=part.source or self.name).inc(part.records)
            if not job.failed:
                try:
                    job.results.append(part.run())
                except BaseException as exc:  # noqa: BLE001 - the caller gets it
                    job.failed = True
                    job.future.set_exception(exc)
            done = self.clock()
            with self._cond:
                self.queued -= 1
                self._charge(part.flows, done - started, done)
                if lane.parts:
                    key = self._priority(lane.parts[0].flows, done)
                    heapq.heappush(self._heap, (key, lane.seq, lane))
                else:
                    job.lanes_left -= 1
                    if job.lanes_left == 0 and not job.failed:
                        job.future.set_result(job.results)
                metrics.PIPELINE_QUEUED.set(self.queued)
