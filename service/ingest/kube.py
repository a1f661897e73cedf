"""Kubernetes events and pod status as evidence lines of the pod's stream.

A vLLM container killed by the kernel's OOM killer prints nothing: ``OOMKilled`` / exit code
137 are only in the pod's status, and evictions, scheduling failures, device-plugin
allocation failures and crash-loop back-offs only in Kubernetes events. These objects arrive
through the same ingest as the logs (a Fluent Bit ``kubernetes_events`` input, the JSON
``kubectl get events -o json`` / ``kubectl get pod -o json`` print, a watch stream's
``{"type", "object"}``) and each becomes one evidence line on the stream of the pod's
container (``namespace/pod/container``, the key its log lines have):

* core/v1 ``Event`` (``involvedObject``, ``reason``, ``message``, ``type``, ``count``,
  ``source``, ``firstTimestamp`` / ``lastTimestamp`` / ``eventTime``) and events.k8s.io/v1
  ``Event`` (``regarding``, ``note``, ``series``, ``deprecatedCount`` ...) about a Pod: Warning
  events, and the Normal ``Killing`` ones (probe kills). The container is
  the one ``fieldPath`` names (``spec.containers{vllm}``); an event about the whole pod
  (FailedScheduling, Evicted, UnexpectedAdmissionError) has none and goes to the pod's
  stream the classifier knows (:func:`service.classify.kube.route`);
* a ``Pod``: every container whose ``state`` / ``lastState`` is ``terminated`` with a reason
  other than ``Completed`` or a non-zero exit code, every ``waiting`` container in a failure
  reason (``CrashLoopBackOff``, ``ImagePullBackOff`` ...), and an ``Evicted`` pod;
* a ``List`` (``items``) or a watch event: each object in it.

**Pod lifecycle** is evidence of its own: a replacement pod continues its predecessor's
failure only when the predecessor is known to have ended (see
:mod:`service.classify.restarts`). ``kube["life"]`` says ``ended`` for a pod being deleted or
killed (a ``Killing`` event that is not a probe's restart, ``Evicted``, ``Preempted``, a
controller's ``SuccessfulDelete``, a watch ``DELETED``, a ``deletionTimestamp``, a pod phase
``Failed`` / ``Succeeded``) and ``created`` for a controller's ``SuccessfulCreate`` (ReplicaSet,
Job, StatefulSet: ``Created pod: <name>``, ``create Pod <name> in StatefulSet <set>
successful``).

The line reads ``[kubernetes event] Warning BackOff pod ml/vllm-0 container vllm on node-3
(x12): Back-off restarting failed container ...`` or ``[kubernetes pod status] pod ml/vllm-0
container vllm terminated: reason OOMKilled, exit code 137, ...``; the rules in
``rules/signatures/kubernetes.yaml`` classify it, and ``rules/benign.yaml`` keeps every other
such line from being guessed at (it stays evidence). ``meta["kube"]`` carries what the
classifier needs: an id for de-duplication (the same event or termination seen again, e.g.
by re-posting a pod's status, counts once), the reason, and whether only the pod is known.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from service.ingest.timestamps import to_epoch
from service.records import KubeEvidence, LogRecord, Meta, Position

EVENT_PREFIX = "[kubernetes event]"
STATUS_PREFIX = "[kubernetes pod status]"
MAX_MESSAGE = 2000  # characters of an event message kept on the line
_FIELD_CONTAINER = re.compile(r"spec\.(?:initContainers|containers|ephemeralContainers)\{([^}]+)\}")
# Normal events kept (everything else Normal is routine: Pulled, Created, Started ...)
_NORMAL_KEPT = frozenset(("Killing",))
# pod events that mean the pod itself is going away (a probe kill restarts the container in
# the same pod: "... will be restarted")
_ENDING_REASONS = frozenset(("Killing", "Evicted", "Preempted", "Preempting"))
# controllers' events naming the pod they created or deleted
_CONTROLLERS = frozenset(
    ("ReplicaSet", "Job", "StatefulSet", "ReplicationController", "LeaderWorkerSet")
)
_CONTROLLER_POD = re.compile(
    r"^(?:Created pod: (?P<created>\S+)|Deleted pod: (?P<deleted>\S+)"
    r"|create Pod (?P<created_sts>\S+) in StatefulSet \S+ successful"
    r"|delete Pod (?P<deleted_sts>\S+) in StatefulSet \S+ successful)"
)
_WAITING_FAILURES = frozenset(
    (
        "CrashLoopBackOff",
        "ImagePullBackOff",
        "ErrImagePull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    )
)


def is_kube_object(obj: Mapping[str, Any]) -> bool:
    """Whether ``obj`` is a Kubernetes Event, Pod, list of them or watch event."""
    if "involvedObject" in obj or "regarding" in obj:
        return "reason" in obj
    kind = obj.get("kind")
    if kind == "Pod":
        return type(obj.get("status")) is dict
    if type(obj.get("items")) is list:
        return type(kind) is str and kind.endswith("List")
    return type(obj.get("object")) is dict and type(obj.get("type")) is str and len(obj) == 2


def kube_records(
    obj: Mapping[str, Any],
    *,
    time: Any = None,
    position: Position | None = None,
    meta: Meta | None = None,
    depth: int = 0,
) -> list[LogRecord]:
    """The evidence records of one Kubernetes object (``[]`` for routine ones)."""
    if "involvedObject" in obj or "regarding" in obj:
        return _event(obj, time, position, meta)
    kind = obj.get("kind")
    if kind == "Pod":
        return _pod(obj, time, position, meta)
    if depth > 2:
        return []
    watched = obj.get("object")
    if obj.get("type") == "DELETED" and type(watched) is dict and watched.get("kind") == "Pod":
        return _pod(watched, time, position, meta, deleted=True)
    items: list[Any] = obj["items"] if type(obj.get("items")) is list else [obj.get("object")]
    out: list[LogRecord] = []
    for item in items:
        if type(item) is dict and is_kube_object(item):
            pos = position if not out or position is None else position.sub(len(out))
            out.extend(kube_records(item, time=time, position=pos, meta=meta, depth=depth + 1))
    return out


def _record(
    ns: str,
    pod: str,
    container: str | None,
    text: str,
    t: float | None,
    position: Position | None,
    meta: Meta | None,
    kube: KubeEvidence,
    node: str | None,
) -> LogRecord:
    rec_meta: Meta = meta.copy() if meta else {}
    rec_meta["namespace"] = ns
    rec_meta["pod"] = pod
    if container:
        rec_meta["container"] = container
    else:
        rec_meta.pop("container", None)
        kube["pod_only"] = True
    if node:
        rec_meta["node"] = node
    rec_meta["kube"] = kube
    key = f"{ns}/{pod}/{container}" if container else f"{ns}/{pod}"
    return LogRecord(key, text, t, rec_meta, position)


def _s(value: Any) -> str:
    return value if type(value) is str else ""


def _d(value: Any) -> Mapping[str, Any]:
    return value if type(value) is dict else {}


def _event(
    ev: Mapping[str, Any], time: Any, position: Position | None, meta: Meta | None
) -> list[LogRecord]:
    ref = ev.get("involvedObject") or ev.get("regarding")
    if type(ref) is not dict:
        return []
    if ref.get("kind") in _CONTROLLERS:
        return _controller_event(ev, ref, time, position, meta)
    if ref.get("kind") != "Pod":
        return []  # events about nodes, deployments ... are not a pod's evidence
    etype = _s(ev.get("type")) or "Normal"
    reason = _s(ev.get("reason"))
    if etype == "Normal" and reason not in _NORMAL_KEPT:
        return []
    ns = _s(ref.get("namespace")) or _s((ev.get("metadata") or {}).get("namespace"))
    name = _s(ref.get("name"))
    if not ns or not name:
        return []
    m = _FIELD_CONTAINER.search(_s(ref.get("fieldPath")))
    container = m.group(1) if m else None
    message = _s(ev.get("message")) or _s(ev.get("note"))
    message = " ".join(message.split())[:MAX_MESSAGE]
    series = _d(ev.get("series"))
    count = ev.get("count") or series.get("count") or ev.get("deprecatedCount") or 1
    count = count if type(count) is int else 1
    source = ev.get("source") or ev.get("deprecatedSource") or {}
    source = source if type(source) is dict else {}
    node = _s(source.get("host")) or None
    if node is None and _s(ev.get("reportingController")) == "kubelet":
        node = _s(ev.get("reportingInstance")) or None
    t = _event_time(ev, time)
    where = f"pod {ns}/{name}" + (f" container {container}" if container else "")
    where += f" on {node}" if node else ""
    times = f" (x{count})" if count > 1 else ""
    text = f"{EVENT_PREFIX} {etype} {reason} {where}{times}: {message}"
    uid = _s((ev.get("metadata") or {}).get("uid")) or _s((ev.get("metadata") or {}).get("name"))
    kube: KubeEvidence = {
        "kind": "event",
        "reason": reason,
        "type": etype,
        "id": f"event:{uid or text}:{count}",
    }
    if reason in _ENDING_REASONS and "will be restarted" not in message:
        kube["life"] = "ended"
    return [_record(ns, name, container, text, t, position, meta, kube, node)]


def _event_time(ev: Mapping[str, Any], time: Any) -> float | None:
    series = _d(ev.get("series"))
    return (
        to_epoch(ev.get("lastTimestamp"))
        or to_epoch(series.get("lastObservedTime"))
        or to_epoch(ev.get("deprecatedLastTimestamp"))
        or to_epoch(ev.get("eventTime"))
        or to_epoch(ev.get("firstTimestamp"))
        or to_epoch(ev.get("deprecatedFirstTimestamp"))
        or to_epoch((ev.get("metadata") or {}).get("creationTimestamp"))
        or to_epoch(time)
    )


def _controller_event(
    ev: Mapping[str, Any],
    ref: Mapping[str, Any],
    time: Any,
    position: Position | None,
    meta: Meta | None,
) -> list[LogRecord]:
    """A controller created or deleted one of its pods: lifecycle evidence of that pod."""
    reason = _s(ev.get("reason"))
    if reason not in ("SuccessfulCreate", "SuccessfulDelete"):
        return []
    message = " ".join((_s(ev.get("message")) or _s(ev.get("note"))).split())[:MAX_MESSAGE]
    m = _CONTROLLER_POD.match(message)
    ns = _s(ref.get("namespace")) or _s((ev.get("metadata") or {}).get("namespace"))
    if m is None or not ns:
        return []
    pod = (
        m.group("created") or m.group("created_sts") or m.group("deleted") or m.group("deleted_sts")
    )
    life = "created" if m.group("created") or m.group("created_sts") else "ended"
    owner = f"{_s(ref.get('kind'))} {ns}/{_s(ref.get('name'))}"
    text = f"{EVENT_PREFIX} Normal {reason} pod {ns}/{pod} by {owner}: {message}"
    uid = _s((ev.get("metadata") or {}).get("uid")) or text
    kube: KubeEvidence = {
        "kind": "event",
        "reason": reason,
        "type": "Normal",
        "life": life,
        "life_only": True,
        "id": f"event:{uid}:{life}",
    }
    return [_record(ns, pod, None, text, _event_time(ev, time), position, meta, kube, None)]


def _pod(
    pod: Mapping[str, Any],
    time: Any,
    position: Position | None,
    meta: Meta | None,
    deleted: bool = False,
) -> list[LogRecord]:
    md = _d(pod.get("metadata"))
    status = _d(pod.get("status"))
    spec = _d(pod.get("spec"))
    ns, name = _s(md.get("namespace")), _s(md.get("name"))
    if not ns or not name:
        return []
    node = _s(spec.get("nodeName")) or None
    uid = _s(md.get("uid")) or name
    out: list[LogRecord] = []
    statuses = [
        s
        for key in ("initContainerStatuses", "containerStatuses")
        for s in (status.get(key) or [])
        if type(s) is dict
    ]
    for cs in statuses:
        cname = _s(cs.get("name"))
        if not cname:
            continue
        restarts = cs.get("restartCount") if type(cs.get("restartCount")) is int else 0
        where = f"pod {ns}/{name} container {cname}" + (f" on {node}" if node else "")
        seen: set[str] = set()
        for which in ("state", "lastState"):  # terminations first: they explain a back-off
            st = _d(cs.get(which))
            term = st.get("terminated")
            if type(term) is not dict:
                continue
            reason = _s(term.get("reason"))
            code = term.get("exitCode")
            if reason == "Completed" or (code == 0 and not reason):
                continue
            tid = f"term:{uid}:{cname}:{_s(term.get('containerID'))}:{_s(term.get('finishedAt'))}"
            if tid in seen:
                continue
            seen.add(tid)
            parts = [f"reason {reason or 'unknown'}"]
            if type(code) is int:
                parts.append(f"exit code {code}")
            if type(term.get("signal")) is int:
                parts.append(f"signal {term['signal']}")
            parts.append(f"restarts {restarts}")
            if term.get("finishedAt"):
                parts.append(f"finished {_s(term.get('finishedAt'))}")
            msg = " ".join(_s(term.get("message")).split())[:MAX_MESSAGE]
            text = f"{STATUS_PREFIX} {where} terminated: {', '.join(parts)}" + (
                f": {msg}" if msg else ""
            )
            t = to_epoch(term.get("finishedAt")) or to_epoch(time)
            kube: KubeEvidence = {"kind": "status", "reason": reason, "id": tid}
            out.append(_record(ns, name, cname, text, t, _pos(position, out), meta, kube, node))
        state = _d(cs.get("state"))
        waiting = state.get("waiting")
        if type(waiting) is dict and _s(waiting.get("reason")) in _WAITING_FAILURES:
            reason = _s(waiting.get("reason"))
            msg = " ".join(_s(waiting.get("message")).split())[:MAX_MESSAGE]
            text = f"{STATUS_PREFIX} {where} waiting: reason {reason}, restarts {restarts}" + (
                f": {msg}" if msg else ""
            )
            kube = {
                "kind": "status",
                "reason": reason,
                "id": f"wait:{uid}:{cname}:{reason}:{restarts}",
            }
            out.append(
                _record(
                    ns, name, cname, text, to_epoch(time), _pos(position, out), meta, kube, node
                )
            )
    evicted = _s(status.get("reason")) == "Evicted"
    ended = _pod_ended(md, status, statuses, deleted)
    if ended is not None and not evicted:
        why, at = ended
        where = f"pod {ns}/{name}" + (f" on {node}" if node else "")
        kube = {
            "kind": "status",
            "reason": why,
            "life": "ended",
            "life_only": True,
            "id": f"ended:{uid}",
        }
        out.append(
            _record(
                ns,
                name,
                None,
                f"{STATUS_PREFIX} {where} ended: {why}",
                to_epoch(at) or to_epoch(time),
                _pos(position, out),
                meta,
                kube,
                node,
            )
        )
    if evicted:
        msg = " ".join(_s(status.get("message")).split())[:MAX_MESSAGE]
        names = [_s(cs.get("name")) for cs in statuses if _s(cs.get("name"))]
        only = names[0] if len(names) == 1 else None  # one container: it is the pod
        where = f"pod {ns}/{name}" + (f" container {only}" if only else "")
        where += f" on {node}" if node else ""
        text = f"{STATUS_PREFIX} {where} Evicted: {msg}"
        kube = {"kind": "status", "reason": "Evicted", "id": f"evicted:{uid}", "life": "ended"}
        out.append(
            _record(ns, name, only, text, to_epoch(time), _pos(position, out), meta, kube, node)
        )
    return out


def _pod_ended(
    md: Mapping[str, Any],
    status: Mapping[str, Any],
    statuses: Sequence[Mapping[str, Any]],
    deleted: bool,
) -> tuple[str, Any] | None:
    """(why, when) the pod itself ended - deleted, being deleted, or its phase final (its
    containers will not be restarted in it) - else None."""
    finished = (
        max(
            (_s(_d(_d(cs.get("state")).get("terminated")).get("finishedAt")) for cs in statuses),
            default="",
        )
        or None
    )
    if deleted:
        return "deleted", md.get("deletionTimestamp") or finished
    if md.get("deletionTimestamp"):
        return "terminating (deleted)", md.get("deletionTimestamp")
    phase = _s(status.get("phase"))
    if phase in ("Failed", "Succeeded"):
        return f"phase {phase}", finished
    return None


def _pos(position: Position | None, out: list[LogRecord]) -> Position | None:
    return position if not out or position is None else position.sub(len(out))
