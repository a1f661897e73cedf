"""Fleet detection: N workloads failing with the same category and a shared key."""

from __future__ import annotations

from service.classify.engine import Classifier
from service.classify.judgements.registry import load_judgements
from service.classify.rulebook import RuleBook
from service.incidents.fleet import find_fleet, fleet_id, fleet_incident, fleet_keys
from service.records import LogRecord

RB = RuleBook()
DRIVER = [
    "| NVIDIA-SMI 575.57.08    Driver Version: 575.57.08      CUDA Version: 12.9     |",
    "INFO 07-27 10:00:00 [__init__.py:239] Automatically detected platform cuda.",
    "RuntimeError: The NVIDIA driver on your system is too old (found version 12090).",
]


def failing_pod(i: int, driver: str = "575.57.08", ns: str = "llm") -> dict:
    clf = Classifier(RB)
    meta = {
        "namespace": ns,
        "pod": f"kimi-{i}-7d9f8c6b5d-x2x4z",
        "container": "vllm",
        "image": "vllm/vllm-openai:kimi-k3",
        "node": f"gpu-{i}",
    }
    changes = []
    for t in DRIVER:
        changes += clf.feed(
            LogRecord(f"{ns}/kimi-{i}/vllm", t.replace("575.57.08", driver), meta=meta)
        )
    return changes[0].incident.to_dict()


PRONE = frozenset(load_judgements().fleet.prone_categories)


def test_twelve_pods_on_one_driver_branch_form_one_fleet() -> None:
    pods = [failing_pod(i) for i in range(12)]
    found = find_fleet(pods[-1], pods[:-1], threshold=3, prone=PRONE)
    assert found is not None
    key, value, members = found
    assert (key, value) == ("driver_branch", "r575")
    assert len(members) == 12
    inc = fleet_incident("driver_incompatible", key, value, members, 0.0, 100.0)
    assert inc.id == fleet_id("driver_incompatible", key, value, 0.0)
    assert inc.extra["fleet"]["count"] == 12
    assert inc.tier == "compatibility"


def test_below_threshold_or_different_keys_is_no_fleet() -> None:
    pods = [failing_pod(0), failing_pod(1)]
    assert find_fleet(pods[0], pods[1:], threshold=3, prone=PRONE) is None
    mixed = [failing_pod(i, driver=f"5{70 + i}.10.01", ns=f"ns{i}") for i in range(4)]
    found = find_fleet(mixed[0], mixed[1:], threshold=3, prone=PRONE)
    assert found is not None and found[0] == "image"  # they still share the image


def test_fleet_keys_from_facts_and_metadata() -> None:
    keys = fleet_keys(failing_pod(3))
    assert keys["driver_branch"] == "r575"
    assert keys["image"] == "vllm/vllm-openai:kimi-k3"
    assert keys["namespace"] == "llm"
