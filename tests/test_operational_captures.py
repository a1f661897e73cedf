"""Every operational judgement, end to end through the CLI (``service.cli main``) and
``classify_records``, on real captures of the vLLM CPU build (tests/fixtures/real, made by
scripts/capture/ops_scenarios.py):

* restart-loop-kv-cache: the same failing start three times, kept as Docker keeps it (one
  appended log, raw and json-file) and as kubelet keeps it (three container logs of one
  pod): one incident, 2 restarts, a crash loop that says restarting will not help;
* the same three container logs as three pods of one Deployment replacing each other;
* serving-kv-saturated: KV cache barely fits, saturated, waiting queue growing (the CPU build
  prints no preemption count even when it preempts: that warning is proven on the V1 stats
  format and the V0 scheduler warning in tests/test_warning_advice.py);
* prefix-caching-zero-hit: prefix caching on, 0% hit rate while prompts are served;
* healthy busy servers: no warning at all.

The service (POST /ingest, one page for the crash loop) is in tests/test_e2e_restarts.py."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from service.classify.engine import Classifier
from service.classify.rulebook import RuleBook
from service.classify.rules import RULES_DIR, load_playbook
from service.cli import main
from service.offline.report import classify_records
from service.sources.files import read_files

REAL = Path(__file__).resolve().parent / "fixtures" / "real"
LOOP = "restart-loop-kv-cache"
RB = RuleBook()
PLAYBOOK = load_playbook(RULES_DIR)
UID = "0f0e6a52-3d7b-4c2e-9a51-6b3f0c2d9e1"


def cli(capsys: pytest.CaptureFixture[str], *paths: Path) -> tuple[int, list[dict]]:
    code = main(["classify", "--json", *map(str, paths)])
    return code, [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.strip()]


def loop_meta() -> dict:
    return json.loads((REAL / f"{LOOP}.meta.json").read_text())


def kubelet_logs(root: Path, pods: list[str]) -> list[Path]:
    """The loop's three container logs where kubelet writes them:
    ``/var/log/pods/<ns>_<pod>_<uid>/<container>/<restart count>.log`` (one pod: 0, 1, 2;
    several pods: each its own 0.log)."""
    out = []
    for n in range(3):
        pod = pods[n if len(pods) > 1 else 0]
        d = root / "var/log/pods" / f"llm_{pod}_{UID}{pods.index(pod)}" / "vllm"
        d.mkdir(parents=True, exist_ok=True)
        dst = d / (f"{n}.log" if len(pods) == 1 else "0.log")
        shutil.copy(REAL / f"{LOOP}.{n}.cri.log", dst)
        out.append(dst)
    return out


def assert_crash_loop(inc: dict, pods: list[str] | None = None) -> None:
    assert (inc["status"], inc["category"], inc["stage"]) == (
        "open",
        "oom_kv_cache",
        "kv_cache_init",
    )
    assert inc["restarts"] == 2
    extra = inc["extra"]
    assert extra["crash_loop"] is True and extra["crash_loop_at"] == 3
    assert extra["restart_helps"] is False
    assert extra["note"].startswith(
        "crash loop: failed the same way 3 times (2 restarts); restarting will not help"
    )
    attempts = extra["attempts"]
    assert [a["attempt"] for a in attempts] == [1, 2, 3]
    assert all(a["stage"] == "kv_cache_init" for a in attempts)
    failed = [a["failed"] for a in attempts]
    started = [a["started"] for a in attempts]
    # each attempt starts after the previous one failed (kubelet's back-off: 10 s, 20 s)
    assert started[1] - failed[0] >= 10 and started[2] - failed[1] >= 20
    assert all(s < f for s, f in zip(started, failed, strict=True))
    if pods:
        assert [a["pod"] for a in attempts] == pods


# ---- restarts ---------------------------------------------------------------------------------
def test_the_capture_is_three_real_attempts() -> None:
    meta = loop_meta()
    assert [a["returncode"] for a in meta["attempts"]] == [1, 1, 1]
    assert len({a["pid"] for a in meta["attempts"]}) == 3
    texts = [(REAL / f"{LOOP}.{n}.cri.log").read_text() for n in range(3)]
    assert all("ValueError: To serve at least one request" in t for t in texts)


@pytest.mark.parametrize("name", [f"{LOOP}.log", f"{LOOP}.docker.log"])
def test_one_container_restarted_by_docker_is_one_incident_and_a_crash_loop(
    capsys: pytest.CaptureFixture[str], name: str
) -> None:
    code, reports = cli(capsys, REAL / name)
    assert code == 1  # an open critical incident
    (rep,) = reports
    assert rep["status"] == "failed" and rep["warnings"] == []
    (inc,) = rep["incidents"]
    assert_crash_loop(inc)


def test_three_container_logs_of_one_pod_are_one_incident_and_a_crash_loop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = kubelet_logs(tmp_path, ["vllm-kv-0"])
    code, reports = cli(capsys, *paths)
    assert code == 1
    (rep,) = reports
    assert rep["stream"] == "llm/vllm-kv-0/vllm"
    (inc,) = rep["incidents"]
    assert_crash_loop(inc, ["vllm-kv-0"] * 3)
    # the same through classify_records (one record stream of the three files)
    (again,) = classify_records(read_files(list(map(str, paths))), Classifier(RB))
    assert [i["restarts"] for i in again["incidents"]] == [2]


def rs_event(reason: str, message: str, at: str, rs_hash: str = "7d9f8b6c4") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "type": "Normal",
        "reason": reason,
        "message": message,
        "count": 1,
        "lastTimestamp": at,
        "involvedObject": {"kind": "ReplicaSet", "namespace": "llm", "name": f"vllm-{rs_hash}"},
        "metadata": {"uid": f"{reason}-{message}"},
        "source": {"component": "replicaset-controller"},
    }


def test_three_replicas_without_evidence_of_replacement_are_three_incidents(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same three logs as three replicas of one Deployment on one node with nothing
    saying one replaced another: each failure is its own, whatever the timing."""
    pods = ["vllm-7d9f8b6c4-x2x4z", "vllm-7d9f8b6c4-k9k8j", "vllm-7d9f8b6c4-q7q7q"]
    code, reports = cli(capsys, *kubelet_logs(tmp_path, pods))
    assert code == 1
    incs = [i for r in reports for i in r["incidents"]]
    assert len({i["id"] for i in incs}) == 3
    assert all(i["restarts"] == 0 and "after_restart_of" not in i["extra"] for i in incs)


def test_three_pods_replacing_each_other_are_one_workload_incident(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Deployment's pod deleted and replaced twice (the ReplicaSet hash stays), or rolled
    out to a new hash: the workload's failure continues in the pod that replaced it."""
    pods = ["vllm-7d9f8b6c4-x2x4z", "vllm-7d9f8b6c4-k9k8j", "vllm-5c4b3a2d1-q7q7q"]
    # what the ReplicaSets said (`kubectl get events -o json`): each failed pod deleted
    # between the attempts, its successor created; without it they are replicas, not one loop
    events = tmp_path / "events.json"
    events.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "List",
                "items": [
                    rs_event("SuccessfulDelete", f"Deleted pod: {pods[0]}", "2026-12-03T12:25:30Z"),
                    rs_event("SuccessfulCreate", f"Created pod: {pods[1]}", "2026-12-03T12:25:30Z"),
                    rs_event("SuccessfulDelete", f"Deleted pod: {pods[1]}", "2026-12-03T12:27:10Z"),
                    rs_event(
                        "SuccessfulCreate",
                        f"Created pod: {pods[2]}",
                        "2026-12-03T12:27:10Z",
                        "5c4b3a2d1",
                    ),
                ],
            }
        )
    )
    code, reports = cli(capsys, events, *kubelet_logs(tmp_path, pods))
    assert code == 1
    assert [r["stream"] for r in reports] == [f"llm/{p}/vllm" for p in pods]
    ids = {i["id"] for r in reports for i in r["incidents"]}
    assert len(ids) == 1  # one incident of the workload, shown with each pod it failed in
    inc = reports[-1]["incidents"][0]
    assert_crash_loop(inc, pods)


def test_the_loop_with_a_fixed_start_resolves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fourth container of the pod that starts (here: a healthy capture of the same build)
    gets past kv_cache_init: the crash loop is resolved."""
    paths = kubelet_logs(tmp_path, ["vllm-kv-0"])
    fixed = paths[0].parent / "3.log"
    shutil.copy(REAL / "healthy-idle-sigint.cri.log", fixed)
    recs = list(read_files(list(map(str, paths))))
    last = max(r.time for r in recs if r.time is not None)
    healthy = list(read_files([str(fixed)]))
    first = min(r.time for r in healthy if r.time is not None)
    for r in healthy:  # the healthy capture was made earlier: move it after the loop
        if r.time is not None:
            r.time += last - first + 40
    (rep,) = classify_records(recs + healthy, Classifier(RB))
    (inc,) = rep["incidents"]
    assert inc["status"] == "resolved" and inc["restarts"] == 2
    assert inc["resolution"] == "run 3 of the workload got past kv_cache_init (reached api_server)"


# ---- warnings -----------------------------------------------------------------------------
def own_move(rule: str) -> str:
    return " ".join(str(PLAYBOOK["warnings"][rule]["first_move"]).split())


def category_move(category: str) -> str:
    return " ".join(str(PLAYBOOK["categories"][category]["first_move"]).split())


def warnings_of(capsys: pytest.CaptureFixture[str], name: str) -> dict[str, dict]:
    code, (rep,) = cli(capsys, REAL / name)
    assert code == 0 and rep["incidents"] == []  # warnings never fail a run
    out = {w["rule"]: w for w in rep["warnings"]}
    for rule, w in out.items():
        assert w["severity"] == "warning"
        assert w["remediation"] == own_move(rule), rule
        assert w["remediation"] != category_move(w["category"]), rule
        assert w["explanation"] and w["extra"]["playbook"]["first_move"] == own_move(rule)
        assert w["detail"], rule
    return out


SATURATION = {
    "kv-cache-barely-fits": r"^the KV cache holds 1\.06x a full-length request of 2,048 tokens \(CPU KV cache size "
    r"2,176 tokens\): fewer than 2$",
    "kv-cache-saturated": r"^CPU KV cache usage ≥ 95% on the last 3 stats lines \(100\.0%, 100\.0%, 100\.0%\); "
    r"1 running, \d+ waiting$",
    "waiting-queue-growing": r"^waiting requests grew on the last 5 stats lines: \d+ → \d+ → \d+ → \d+ → \d+ \(\d+ "
    r"running, CPU KV cache usage [\d.]+%\)$",
}


@pytest.mark.parametrize("name", ["serving-kv-saturated.log", "serving-kv-saturated.cri.log"])
def test_a_saturated_server_gets_each_capacity_warning_with_its_own_advice(
    capsys: pytest.CaptureFixture[str], name: str
) -> None:
    found = warnings_of(capsys, name)
    assert set(found) == set(SATURATION)
    for rule, pattern in SATURATION.items():
        assert re.search(pattern, found[rule]["detail"]), (rule, found[rule]["detail"])
    queue = [
        int(x)
        for x in re.findall(
            r"\d+", found["waiting-queue-growing"]["detail"].split(": ", 1)[1].split(" (")[0]
        )
    ]
    assert queue == sorted(queue) and len(set(queue)) == 5 and queue[-1] >= 10
    assert found["kv-cache-barely-fits"]["stage"] == "kv_cache_init"
    assert found["kv-cache-saturated"]["stage"] == "serving"


@pytest.mark.parametrize("name", ["prefix-caching-zero-hit.log", "prefix-caching-zero-hit.cri.log"])
def test_prefix_caching_with_a_zero_hit_rate_warns_with_its_own_advice(
    capsys: pytest.CaptureFixture[str], name: str
) -> None:
    found = warnings_of(capsys, name)
    assert list(found) == ["prefix-cache-hit-zero"]
    w = found["prefix-cache-hit-zero"]
    assert re.search(
        r"^prefix cache hit rate 0\.0% on the last 6 stats lines with prompts being "
        r"served \(prompt throughput [\d., ]+ tokens/s\)$",
        w["detail"],
    ), w["detail"]
    assert "byte-identical" in w["remediation"]


@pytest.mark.parametrize(
    "name",
    [
        "healthy-serving-prefix-caching-sigterm",
        "healthy-client-errors",
        "healthy-tp2",
        "healthy-debug-logging",
        "healthy-forced-colour",
    ],
)
def test_healthy_busy_servers_get_no_warning(capsys: pytest.CaptureFixture[str], name: str) -> None:
    code, (rep,) = cli(capsys, REAL / f"{name}.cri.log")
    assert code == 0 and rep["incidents"] == [] and rep["warnings"] == []
