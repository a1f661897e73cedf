"""What one processed batch changes, committed by :meth:`Store.commit_batch` in one
transaction."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict

from service.incidents.incident_json import IncidentBody, IncidentSummary
from service.incidents.snapshots import NoveltySnapshot, StreamSnapshot
from service.incidents.workload import WorkloadSnapshot
from service.records import Position

NOTIFIABLE = ("opened", "updated", "resolved")


class StaleBatch(Exception):  # noqa: N818 - a condition, not an error
    """A source position moved since the batch was read (another consumer applied it), or a
    stream or workload snapshot changed since it was loaded (another replica wrote it)."""


class DuplicateChunk(Exception):  # noqa: N818
    """The forward chunk id was committed already (by this or another instance)."""


@dataclass(slots=True)
class IncidentWrite:
    """One incident touched by the batch: its final state and its notifiable changes in
    order (``opened`` / ``updated`` / ``resolved``; empty when only evidence was added)."""

    body: IncidentBody
    summary: IncidentSummary  # kept with each outbox event
    kinds: list[str] = field(default_factory=list)
    notify: bool = True  # False: bump the version but enqueue no outbox event


@dataclass(slots=True)
class PositionAdvance:
    """Compare-and-set of a source position: the applied offset of ``to.source`` /
    ``to.partition`` becomes ``to.offset``; ``expected`` is the applied offset the batch was
    filtered against (None: none yet); the commit fails with :class:`StaleBatch` otherwise."""

    to: Position
    expected: int | None


class QuarantineRecord(TypedDict):
    """A record whose classification raised (a row of the ``quarantine`` table)."""

    source: str
    stream: str
    position: str | None
    reason: str  # the exception's type
    error: str
    text: str  # its first QUARANTINE_TEXT_CAP characters
    length: int  # of the whole text


@dataclass
class BatchEffects:
    streams: dict[str, StreamSnapshot] = field(default_factory=dict)  # key → snapshot
    incidents: list[IncidentWrite] = field(default_factory=list)
    positions: list[PositionAdvance] = field(default_factory=list)
    chunk_id: str | None = None
    at: float = 0.0  # wall clock of the commit (outbox created_at, changed_at)
    # key → the snapshot version the batch started from (None: the stream did not exist);
    # the commit fails with StaleBatch when a stream listed here has another version now.
    # Streams not listed are written whatever their version.
    stream_versions: dict[str, int | None] = field(default_factory=dict)
    # records whose classification raised (rows of the ``quarantine`` table)
    quarantined: list[QuarantineRecord] = field(default_factory=list)
    # workload key → what its pods share (WorkloadState.to_dict()), with the version each
    # continues: compare-and-set as for streams (None: insert only)
    workloads: dict[str, WorkloadSnapshot] = field(default_factory=dict)
    workload_versions: dict[str, int | None] = field(default_factory=dict)
    # the novelty miner's templates when new ones appeared (NoveltyDetector.to_dict())
    novelty: NoveltySnapshot | None = None
    # filled in by commit_batch: incidents left untouched because they were resolved by
    # hand (the pipeline drops them from its in-memory state)
    skipped_incidents: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(
            self.streams
            or self.incidents
            or self.positions
            or self.chunk_id
            or self.quarantined
            or self.workloads
            or self.novelty
        )


def collapse_kinds(kinds: list[str]) -> list[str]:
    """Notifiable changes of one incident within a batch, one event each: ``updated`` right
    after ``opened``/``updated`` adds nothing (messages render the current state)."""
    out: list[str] = []
    for kind in kinds:
        if kind not in NOTIFIABLE:
            continue
        if kind == "updated" and out and out[-1] in ("opened", "updated"):
            continue
        out.append(kind)
    return out
