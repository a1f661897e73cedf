"""One owner of every stream's state: the :class:`StreamTracker`.

For the classifier it holds each stream's :class:`StreamState`, what the streams of one
workload share (:class:`WorkloadState`: the facts of its last good start, its open failures
per node, so a replacement pod continues its predecessor's incident), what each process is
in the middle of (:class:`ProcessTracks`) and the novelty miner whose templates are saved
with them. For the service it keeps the version of each saved snapshot, the partitions a
stream's records came from, and which streams stay in memory: at most ``max_streams`` (the
least recently touched go), none idle for ``idle_evict_s`` - but a startup with nothing open
stays until its stall deadline could have passed (``startup_hold_s`` more).

Saved state comes back through a :class:`Persistence` handed in from above (the pipeline
implements it over the store; the tracker never calls up): ``load_stream(key)`` /
``load_workload(key)`` give a :class:`Versioned` snapshot (state and version) or None,
``load_novelty()`` the miner's templates. The tracker never writes: :meth:`snapshots` says
what a batch changed (with the version each snapshot continues, for a compare-and-set), the
caller writes it in its own transaction and reports back with :meth:`saved`, or
:meth:`discard_unsaved` and :meth:`forget` when the write failed (memory never runs ahead of
the store). Workloads are read through: with a persistence they stay in memory only for the
batch that used them, so replicas sharing a store agree. Without a persistence (the CLI, the
API's classify) everything is memory only.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from service.classify.stream_state import STARTING, StreamState
from service.classify.tracebacks import ProcessTracks
from service.incidents.snapshots import NoveltySnapshot, StreamSnapshot, Versioned
from service.incidents.workload import (
    MAX_WORKLOADS,
    WorkloadSnapshot,
    WorkloadState,
    workload_key,
)

S = TypeVar("S")


class Persistence(Protocol):
    """Where the tracker's saved state is read from."""

    def load_stream(self, key: str) -> Versioned[StreamSnapshot] | None: ...

    def load_workload(self, key: str) -> Versioned[WorkloadSnapshot] | None: ...

    def load_novelty(self) -> NoveltySnapshot | None: ...


class NoveltyState(Protocol):
    """What the tracker needs of the novelty miner to save it."""

    changed: bool

    def observe(self, text: str) -> tuple[str, bool]: ...

    def to_dict(self) -> NoveltySnapshot: ...

    def restore(self, data: Any) -> None: ...


@dataclass(slots=True)
class Saves:
    """What to write for one batch: snapshots (``to_dict``) by key, and the version each
    continues (None: not saved yet; a key without one is written whatever is there)."""

    streams: dict[str, StreamSnapshot] = field(default_factory=dict)
    stream_versions: dict[str, int | None] = field(default_factory=dict)
    workloads: dict[str, WorkloadSnapshot] = field(default_factory=dict)
    workload_versions: dict[str, int | None] = field(default_factory=dict)
    novelty: NoveltySnapshot | None = None


class StreamTracker:
    """Every stream's state, in memory and through a :class:`Persistence`."""

    def __init__(
        self,
        persistence: Persistence | None = None,
        *,
        max_streams: int | None = None,
        idle_evict_s: float | None = None,
        startup_hold_s: float = 0.0,
        novelty: NoveltyState | None = None,
    ) -> None:
        self.persistence = persistence
        self.max_streams = max_streams
        self.idle_evict_s = idle_evict_s
        self.startup_hold_s = startup_hold_s
        self.novelty = novelty
        self.streams: dict[str, StreamState] = {}
        self.workloads: OrderedDict[str, WorkloadState] = OrderedDict()
        self.tracks = ProcessTracks()
        # key → version of the saved snapshot the state in memory continues (None: new)
        self.versions: dict[str, int | None] = {}
        self.workload_versions: dict[str, int | None] = {}
        self.partitions: dict[str, set[str]] = {}  # stream → partitions its records came from
        # streams saved, least recently touched first → monotonic time of the last touch
        self.recent: OrderedDict[str, float] = OrderedDict()
        self.unsaved: set[str] = set()  # workloads changed since they were saved

    def attach(
        self,
        persistence: Persistence,
        *,
        max_streams: int,
        idle_evict_s: float,
        startup_hold_s: float,
    ) -> None:
        """Load and keep state through ``persistence`` from now on (the service's pipeline
        hands in its store), with these memory limits; the novelty templates come back."""
        self.persistence = persistence
        self.max_streams = max_streams
        self.idle_evict_s = idle_evict_s
        self.startup_hold_s = startup_hold_s
        saved = persistence.load_novelty() if self.novelty is not None else None
        if self.novelty is not None and saved:
            self.novelty.restore(saved)
            self.novelty.changed = False

    # ---- streams ---------------------------------------------------------------------
    def find(self, key: str) -> StreamState | None:
        """The stream ``key`` in memory, else as saved (then kept in memory), else None."""
        st = self.streams.get(key)
        if st is None and self.persistence is not None:
            snap = self.persistence.load_stream(key)
            if snap is not None:
                st = self.streams[key] = StreamState.from_dict(snap.state)
                self.versions[key] = snap.version
        return st

    def state(self, key: str, meta: Mapping[str, Any] | None = None) -> StreamState:
        """The stream ``key`` (:meth:`find`), else a new one that knows its workload's last
        good start."""
        st = self.find(key)
        if st is None:
            st = StreamState(key=key, meta=dict(meta or {}))
            st.last_good_facts = self.workload(workload_key(key, st.meta)).last_good
            self.streams[key] = st
            if self.persistence is not None:
                self.versions[key] = None
        return st

    def came_from(self, stream: str, partition: str) -> None:
        self.partitions.setdefault(stream, set()).add(partition)

    def streams_from(self, partitions: set[str]) -> list[str]:
        """The streams whose records came from any of ``partitions``."""
        return [s for s, parts in self.partitions.items() if parts & partitions]

    def drop_incidents(self, ids: set[str]) -> None:
        """Incidents resolved by hand in the store leave the streams in memory too."""
        if ids:
            for st in self.streams.values():
                st.incidents = [i for i in st.incidents if i.id not in ids]

    def forget(self, keys: Iterable[str]) -> None:
        """Drop streams from memory (their snapshot is reloaded by their next line)."""
        gone = set(keys)
        for k in gone:
            self.streams.pop(k, None)
            self.partitions.pop(k, None)
            self.recent.pop(k, None)
            self.versions.pop(k, None)
        self.tracks.forget(gone)

    # ---- workloads -------------------------------------------------------------------
    def good_start(self, st: StreamState) -> None:
        """``st``'s run got ready: its facts are its workload's last good ones."""
        st.last_good_facts = dict(st.facts)
        workload = self.workload(workload_key(st.key, st.meta))
        workload.last_good = st.last_good_facts
        self.changed(workload.key)

    def workload(self, key: str) -> WorkloadState:
        """The workload ``key``: in memory, else as saved, else new."""
        w = self.workloads.get(key)
        if w is not None:
            self.workloads.move_to_end(key)
            return w
        snap = self.persistence.load_workload(key) if self.persistence is not None else None
        if snap is None:
            w = WorkloadState(key)
            version = None
        else:
            w = WorkloadState.from_dict(snap.state)
            version = snap.version
        self.workloads[key] = w
        if self.persistence is not None:
            self.workload_versions[key] = version
        else:
            while len(self.workloads) > MAX_WORKLOADS:
                self.workloads.popitem(last=False)
        return w

    def changed(self, key: str) -> None:
        """The workload ``key`` changed: saved with the batch."""
        if self.persistence is not None:
            self.unsaved.add(key)

    # ---- saving ----------------------------------------------------------------------
    def snapshots(self, touched: Iterable[str]) -> Saves:
        """What to write: the touched streams, the workloads changed, the novelty templates
        when new ones appeared."""
        keys = list(touched)
        novelty = self.novelty
        return Saves(
            streams={k: self.state(k).to_dict() for k in keys},
            stream_versions={k: self.versions[k] for k in keys if k in self.versions},
            workloads={k: self.workloads[k].to_dict() for k in self.unsaved},
            workload_versions={k: self.workload_versions.get(k) for k in self.unsaved},
            novelty=novelty.to_dict() if novelty is not None and novelty.changed else None,
        )

    def saved(self, saves: Saves, now: float | None = None) -> None:
        """``saves`` are written: versions move on, the streams count as touched (the least
        recently touched go past ``max_streams``), workloads are read afresh next time."""
        for k in saves.streams:
            if k in self.versions:
                self.versions[k] = (self.versions[k] or 0) + 1
        for k in saves.workloads:
            self.workload_versions[k] = (self.workload_versions.get(k) or 0) + 1
        if saves.novelty is not None and self.novelty is not None:
            self.novelty.changed = False
        self.unsaved.clear()
        self._read_through()
        at = time.monotonic() if now is None else now
        for k in saves.streams:
            self.recent[k] = at
            self.recent.move_to_end(k)
        while self.max_streams is not None and len(self.recent) > self.max_streams:
            key, _ = self.recent.popitem(last=False)
            self.forget([key])

    def discard_unsaved(self) -> None:
        """The write failed: workload changes in memory are dropped (read again)."""
        self.unsaved.clear()
        self._read_through()

    def _read_through(self) -> None:
        if self.persistence is not None:
            self.workloads.clear()
            self.workload_versions.clear()

    def evict_idle(self, now: float | None = None) -> int:
        """Forget the streams no line touched for ``idle_evict_s`` (their snapshot is saved
        and is reloaded by their next line); a stream still starting with nothing open is
        kept until its stall deadline could have passed. Returns how many went."""
        if self.idle_evict_s is None:
            return 0
        now = time.monotonic() if now is None else now
        gone = 0
        for key, touched in list(self.recent.items()):
            idle = now - touched
            if idle < self.idle_evict_s:
                break  # least recently touched first: the rest are younger
            st = self.streams.get(key)
            if (
                st is not None
                and st.status == STARTING
                and st.current() is None
                and idle < self.idle_evict_s + self.startup_hold_s
            ):
                continue
            self.forget([key])
            gone += 1
        return gone
