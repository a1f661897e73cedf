"""Helpers for the delivery-guarantee tests: incidents written straight into the store (as
another replica's pipeline commits them), a receiver that can act while it holds a request
(kill the sender, cut its database), and counting what the receiver saw."""

from __future__ import annotations

import copy
import functools
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from service.incidents.incident import Incident
from service.store import BatchEffects, IncidentWrite, Store
from tests.receiver import Receiver, Request
from tests.test_store import REAL, classifier, k8s, kafka_records


@functools.cache
def _template() -> dict[str, Any]:
    """A real incident (a KV-cache OOM, not fleet-prone) as the classifier stores it."""
    clf = classifier()
    last = None
    for rec in kafka_records(
        REAL / "kv-cache-too-small.cri.log", stream="t/t/vllm", meta=k8s("t", "t")
    ):
        for ch in clf.feed(rec):
            last = ch.incident
    assert last is not None
    return last.to_dict()


def incident_body(
    n: int,
    *,
    prefix: str = "load",
    status: str = "open",
    at: float | None = None,
    namespace: str = "load",
) -> dict[str, Any]:
    at = time.time() if at is None else at
    body = copy.deepcopy(_template())
    pod = f"{prefix}-{n}"
    body.update(
        id=f"{prefix}-{n:05d}",
        stream=f"{namespace}/{pod}/vllm",
        meta={**k8s(namespace, pod)},
        opened_at=at,
        updated_at=at,
        status=status,
    )
    if status == "resolved":
        body.update(resolved_at=at, resolution="the workload started serving")
    return body


def write_change(store: Store, body: dict[str, Any], kind: str, at: float | None = None) -> None:
    """Commit one notifiable change of an incident (with its outbox event)."""
    summary = Incident.from_dict(body).summary()
    eff = BatchEffects(incidents=[IncidentWrite(body, summary, kinds=[kind])])
    if at is not None:
        eff.at = at
    store.commit_batch(eff)


class HookReceiver(Receiver):
    """A :class:`Receiver` that calls ``on_request(request)`` while it holds each request,
    before answering (the sender is waiting for the answer)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.on_request: Callable[[Request], None] | None = None
        self._hook_lock = threading.Lock()

    def _record(self, req: Request) -> None:
        hook = self.on_request
        if hook is not None:
            with self._hook_lock:  # one at a time: actions see consistent counts
                hook(req)
        super()._record(req)

    def paths(self, path: str) -> list[Request]:
        return [r for r in self.accepted() if r.path == path]


def complete(r: Request) -> bool:
    """Answered 2xx and whole: a sender killed while writing leaves a truncated body that
    the test receiver still answers (a real one would refuse it)."""
    if not 200 <= r.status < 300:
        return False
    try:
        r.json()
    except ValueError:
        return False
    return True


def message_key(r: Request) -> tuple[str, str]:
    """(receiver path, message id): the idempotency key the receiver deduplicates on."""
    key = r.header("Idempotency-Key") or r.header("X-Sentinel-Event-Id") or ""
    return r.path, key


def duplicates(requests: list[Request]) -> dict[tuple[str, str], int]:
    """Message ids answered 2xx more than once, per receiver path."""
    counts = Counter(message_key(r) for r in requests if complete(r))
    return {k: n for k, n in counts.items() if n > 1}


def last_versions(requests: list[Request]) -> dict[tuple[str, str], tuple[int, str]]:
    """(path, incident id) → (version, event kind) of the last accepted message."""
    out: dict[tuple[str, str], tuple[int, str]] = {}
    for r in requests:
        if not complete(r):
            continue
        inc_id, _, v = (r.header("X-Sentinel-Event-Id") or "").rpartition(".v")
        body = r.json()
        kind = body.get("event") or (
            "resolved" if body.get("event_action") == "resolve" else "trigger"
        )
        prev = out.get((r.path, inc_id))
        if prev is None or int(v) >= prev[0]:
            out[(r.path, inc_id)] = (int(v), kind)
    return out
