"""A stream's control state is typed (``StreamState`` and its ``RunState``, ``Incident``'s
crash loop and pending restart), and a snapshot an older version saved - those flags as
keys of ``extra`` - reads back into the typed fields; what is saved and shown keeps the keys
and places it had."""

from __future__ import annotations

import json
from typing import Any

from service.classify.run_state import Moment, Pending, PodLife, ServingStats, Waiting
from service.classify.stream_state import StreamState
from service.incidents.finding import Finding
from service.incidents.incident import CrashLoop, Incident, PendingRestart
from service.incidents.snapshots import StreamSnapshot


def finding() -> Finding:
    return Finding("capacity", "oom_kv_cache", "kv_cache_init", 0.9, "signature", "r", "boom")


def body(extra: dict[str, Any]) -> dict[str, Any]:
    inc = Incident("i1", "s", 1, finding()).to_dict()
    return {**inc, "extra": extra}


OLD_INCIDENT_EXTRA = {
    "reached": "model_load",
    "after_restart_of": {"id": "i0", "category": "oom_kv_cache", "stage": "x", "restarts": 0},
    "pending_restart_of": "i0",
    "stall": True,
}

OLD_STREAM: dict[str, Any] = {
    "key": "s",
    "meta": {},
    "run": 2,
    "status": "failed",
    "stage": "model_load",
    "timeline": {},
    "facts": {},
    "last_good_facts": None,
    "shutting_down": False,
    "seq": 9,
    "last_time": 100.0,
    "first_time": 90.0,
    "last_line": "",
    "last_stage_change": None,
    "frame_hint": {},
    "incidents": [body(OLD_INCIDENT_EXTRA)],
    "runs_failed": 1,
    "extra": {
        "waiting": {"template": "waiting for <*>", "stage": "model_load", "count": 3, "first": 1.0},
        "stats": {"kv": [99.0], "kv_high": 1},
        "api_pid": 42,
        "pod_life": {"created": None, "ended": 5.0},
        "pending": {"incident": "i1", "since": 95.0},
        "kube_seen": ["ev-1"],
        "last_failure": {
            "id": "i0",
            "category": "oom_kv_cache",
            "stage": "x",
            "restarts": 0,
            "run": 1,
            "started": 80.0,
        },
    },
}


def test_an_older_snapshot_reads_into_the_typed_fields() -> None:
    snap: StreamSnapshot = json.loads(json.dumps(OLD_STREAM))
    st = StreamState.from_dict(snap)
    assert st.checks.waiting == Waiting("waiting for <*>", "model_load", 3, 1.0)
    assert st.checks.stats == ServingStats(kv=[99.0], kv_high=1)
    assert st.checks.api_pid == 42
    assert st.pod_life == PodLife(ended=Moment(5.0), created=Moment(None))
    assert st.pending == Pending("i1", 95.0)
    assert st.kube_seen == ["ev-1"]
    assert st.last_failure is not None and st.last_failure["run"] == 1
    (inc,) = st.incidents
    assert inc.pending_restart == PendingRestart("i0")
    assert "pending_restart_of" not in inc.extra  # the flag lives in the typed field only


def test_what_is_saved_keeps_the_keys_and_their_places() -> None:
    st = StreamState.from_dict(json.loads(json.dumps(OLD_STREAM)))
    saved = st.to_dict()
    # an incident's pending restart right after its after_restart_of, as it was written
    assert list(saved["incidents"][0]["extra"]) == list(OLD_INCIDENT_EXTRA)
    assert saved["incidents"][0]["extra"]["pending_restart_of"] == "i0"
    extra = saved["extra"]
    assert extra["pending"] == {"incident": "i1", "since": 95.0}
    assert extra["pod_life"] == {"ended": 5.0, "created": None}
    assert extra["api_pid"] == 42 and extra["kube_seen"] == ["ev-1"]
    assert StreamState.from_dict(json.loads(json.dumps(saved))) == st


def test_a_fresh_stream_saves_no_control_keys() -> None:
    assert StreamState("s").to_dict()["extra"] == {}


def test_a_crash_loop_is_typed_and_shown_where_it_was() -> None:
    inc = Incident("i1", "s", 1, finding())
    inc.extra["attempts"] = []
    inc.mark_crash_loop(CrashLoop(False, "crash loop: ...", attempts=3))
    shown = inc.summary()["extra"]
    assert list(shown) == ["attempts", "crash_loop", "crash_loop_at", "restart_helps", "note"]
    assert shown["crash_loop"] is True and shown["restart_helps"] is False
    back = Incident.from_dict(json.loads(json.dumps(inc.to_dict())))
    assert back.crash_loop == CrashLoop(False, "crash loop: ...", attempts=3)
    # Kubernetes' back-off said so: its source is kept and read back
    kube = Incident("i2", "s", 1, finding())
    kube.mark_crash_loop(CrashLoop(True, "k", source="kubernetes"))
    assert kube.crash_loop is not None and kube.crash_loop.source == "kubernetes"
    assert Incident.from_dict(json.loads(json.dumps(kube.to_dict()))).crash_loop == (
        kube.crash_loop
    )
