"""Whether one pod replaced another: evidence, never timing alone.

Replicas of one Deployment on one node (eight pods, one GPU each, is the usual GPU node)
share their workload and node, so a replica that starts after another failed looks exactly
like its replacement when only times are known. A pod continues another pod's failure only
when Kubernetes said so:

* the predecessor **ended** before the new pod started: a ``Killing`` event that is not a
  probe's restart, an eviction or preemption, a controller's ``SuccessfulDelete``, a watch
  ``DELETED``, a ``deletionTimestamp``, a final pod phase (a Job's failed pod);
* or the new pod was **created** by its controller (``SuccessfulCreate``) after the
  predecessor's failure.

StatefulSet and LeaderWorkerSet pods keep their name when replaced (the same stream, a new
container), so they never need this. Without evidence, replicas stay apart: each failure is
its own incident. The evidence is kept on the pods' streams (``extra.pod_life``), so it is
saved and reloaded with them.
"""

from __future__ import annotations

from typing import Any

from service.classify.incident import Incident
from service.classify.stream_state import FAILED, STOPPED, StreamState

ENDED, CREATED = "ended", "created"
# clock skew allowed between the API server's event times and the node's log times
SKEW_S = 2.0


def note_life(st: StreamState, life: str, time: float | None) -> None:
    """Record that the pod of ``st`` ended or was created (at ``time`` when known; the
    earliest time seen is kept)."""
    book: dict[str, Any] = st.extra.setdefault("pod_life", {})
    seen = book.get(life)
    if life not in book or (time is not None and (seen is None or time < seen)):
        book[life] = time


def inherit_life(st: StreamState, placeholder: StreamState) -> None:
    """A container stream of a pod appeared: the evidence its pod's placeholder stream
    (``namespace/pod``) collected before (e.g. its controller created it) is its own."""
    for life, time in (placeholder.extra.get("pod_life") or {}).items():
        note_life(st, life, time)


def evidence(old: StreamState, new: StreamState, failure: Incident) -> int:
    """How strongly Kubernetes says ``new``'s pod replaced ``old``'s, whose open ``failure``
    it may continue: 2 the old pod ended before the new one started, 1 the new pod was
    created after the failure (its controller replaced *some* pod), 0 no word of it."""
    if old.status not in (FAILED, STOPPED):
        return 0
    ended = old.extra.get("pod_life") or {}
    if ENDED in ended:
        at = ended[ENDED]
        return 2 if at is None or new.first_time is None or at <= new.first_time + SKEW_S else 0
    created = new.extra.get("pod_life") or {}
    if CREATED in created:
        at, failed = created[CREATED], failure.opened_at
        return 1 if at is None or failed is None or at + SKEW_S >= failed else 0
    return 0
