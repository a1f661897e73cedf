"""Which pods can replace one another: Deployment and Job pods get new names, StatefulSet and
LeaderWorkerSet pods keep theirs (another ordinal is another replica, running beside it)."""

from __future__ import annotations

from service.incidents.workload import restart_unit


def meta(pod: str, **labels: str) -> dict:
    return {"namespace": "llm", "pod": pod, "container": "vllm", "node": "gpu-1", "labels": labels}


def test_deployment_pods_share_a_restart_unit_on_one_node() -> None:
    a = restart_unit("s1", meta("vllm-7d9f8b6c4-x2x9z", **{"pod-template-hash": "7d9f8b6c4"}))
    b = restart_unit("s2", meta("vllm-7d9f8b6c4-q8w2e", **{"pod-template-hash": "7d9f8b6c4"}))
    assert a is not None and a == b


def test_statefulset_ordinals_are_replicas_not_replacements() -> None:
    assert restart_unit("s", meta("crash-0")) is None
    assert restart_unit("s", meta("vllm-lws-1-2")) is None
    assert restart_unit("s", {"pod": None}) is None
