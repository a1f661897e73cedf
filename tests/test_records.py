"""Records declared once (``service/incidents/codec.py``): their JSON, reading it back, older
and newer bodies, and the typed shapes readers index."""

from __future__ import annotations

import json
from typing import Any

from service.incidents.finding import Finding
from service.incidents.incident import CrashLoop, Incident
from service.incidents.incident_json import FindingBody, IncidentBody, IncidentSummary
from service.incidents.workload import WorkloadSnapshot, WorkloadState


def _finding(seq: int = 0, **kw: Any) -> Finding:
    base: dict[str, Any] = {
        "tier": "gpu",
        "category": "cuda_oom",
        "stage": "model_load",
        "confidence": 0.93,
        "method": "signature",
        "rule": f"rule-{seq}",
        "line": f"torch.OutOfMemoryError at line {seq}",
        "seq": seq,
        "time": 1700000000.5,
    }
    return Finding(**{**base, **kw})


def _incident() -> Incident:
    inc = Incident(
        id="abc",
        stream="ns/pod/c",
        run=1,
        primary=_finding(),
        facts={"image": "vllm/vllm-openai:v0.9"},
        timeline={"start": 3, "model_load": 1700000001.25},  # a line number stays an int
        evidence=["a", "b"],
        meta={"namespace": "ns", "labels": {"app": "x"}},
        opened_at=1700000000.0,
        extra={"reached": "model_load", "later_key": [1]},  # type: ignore[typeddict-unknown-key]
    )
    inc.mark_crash_loop(CrashLoop(restart_helps=False, note="failed 3 times", attempts=3))
    inc.add(_finding(1, role="cascade", rule="other"))
    return inc


def test_json_round_trip_is_byte_identical() -> None:
    inc = _incident()
    text = json.dumps(inc.to_dict())
    back = Incident.from_dict(json.loads(text))
    assert json.dumps(back.to_dict()) == text
    assert back == inc


def test_json_keys_follow_the_declarations() -> None:
    inc = _incident()
    body = inc.to_dict()
    assert list(body) == list(IncidentBody.__annotations__)
    assert list(body["primary"]) == list(FindingBody.__annotations__)
    assert list(inc.summary()) == list(IncidentSummary.__annotations__)
    w = WorkloadState(key="ns/app/c", failures={"n1": {"abc": "ns/pod/c"}})
    assert list(w.to_dict()) == list(WorkloadSnapshot.__annotations__)


def test_open_json_is_kept_as_stored() -> None:
    """Judgements keep their key order and the keys a newer version wrote; numbers are not
    converted (a line number in the timeline stays an int)."""
    back = Incident.from_dict(json.loads(json.dumps(_incident().to_dict())))
    assert list(back.extra) == [
        "reached",
        "later_key",
        "crash_loop",
        "crash_loop_at",
        "restart_helps",
        "note",
    ]
    assert back.timeline["start"] == 3 and isinstance(back.timeline["start"], int)
    assert back.to_dict()["extra"] == {
        "reached": "model_load",
        "later_key": [1],
        "crash_loop": True,
        "crash_loop_at": 3,
        "restart_helps": False,
        "note": "failed 3 times",
    }


def test_an_older_body_takes_defaults_and_unknown_keys_are_left_out() -> None:
    old: dict[str, Any] = {
        "id": "old",
        "stream": "s",
        "run": 0,
        "primary": {
            "tier": "gpu",
            "category": "cuda_oom",
            "stage": "model_load",
            "confidence": 0.5,
            "method": "signature",
            "rule": None,
            "line": "x",
            "gone": "a key no version reads any more",
        },
        "some_future_key": 1,
    }
    inc = Incident.from_dict(old)  # type: ignore[arg-type]
    assert inc.primary.stage_source == "tracker" and inc.primary.detail is None
    assert inc.related == [] and inc.extra == {} and inc.status == "open"
    assert "some_future_key" not in inc.to_dict()
    assert "gone" not in inc.to_dict()["primary"]


def test_summary_flattens_the_root_cause() -> None:
    inc = _incident()
    s = inc.summary()
    assert (s["id"], s["category"], s["line"]) == ("abc", "cuda_oom", inc.primary.line)
    assert s["related"] == [
        {
            "category": "cuda_oom",
            "rule": "other",
            "role": "cascade",
            "method": "signature",
            "stage": "model_load",
            "line": "torch.OutOfMemoryError at line 1",
        }
    ]
    s["evidence"].append("c")
    s["extra"]["reached"] = "x"
    assert inc.evidence == ["a", "b"] and inc.extra["reached"] == "model_load"


def test_workload_state_round_trip() -> None:
    w = WorkloadState(key="k", last_good={"image": "i"}, failures={"n": {"id": "s"}})
    assert WorkloadState.from_dict(json.loads(json.dumps(w.to_dict()))) == w
    assert WorkloadState.from_dict({"key": "k"}) == WorkloadState(key="k")  # type: ignore[typeddict-item]
