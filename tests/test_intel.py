"""Judgements beyond single lines: stalls (controllable clock), crash loops, last good vs
now, prefix-caching and capacity warnings, the playbook."""

from __future__ import annotations

from service.classify.engine import Classifier
from service.classify.rulebook import RuleBook
from service.offline.report import classify_records
from service.records import LogRecord
from tests.test_engine import HEALTHY_V1, STARTUP

RB = RuleBook()


def feed(
    clf: Classifier,
    text: str,
    stream: str = "ns/pod/vllm",
    t0: float = 1000.0,
    step: float = 1.0,
    meta: dict | None = None,
) -> list:
    changes = []
    for i, line in enumerate(text.splitlines()):
        changes += clf.feed(LogRecord(stream, line, time=t0 + i * step, meta=meta or {}))
    return changes


def report(text: str) -> dict:
    return classify_records([LogRecord("s", t) for t in text.splitlines()], Classifier(RB))[0]


def stats(
    kv: float, waiting: int, hit: float = 10.0, prompt: float = 100.0, preempt: int | None = None
) -> str:
    pre = f", Preemptions: {preempt}" if preempt is not None else ""
    return (
        f"(APIServer pid=1) INFO 07-21 05:00:10 [loggers.py:123] Engine 000: Avg prompt "
        f"throughput: {prompt} tokens/s, Avg generation throughput: 35.1 tokens/s, Running: "
        f"8 reqs, Waiting: {waiting} reqs{pre}, GPU KV cache usage: {kv}%, Prefix cache hit "
        f"rate: {hit}%"
    )


HANG = STARTUP + (
    "(VllmWorker rank=0 pid=70) INFO 07-21 04:58:55 [parallel_state.py:1] world_size=2 rank=0 "
    "local_rank=0 distributed_init_method=tcp://10.0.0.1:29500 backend=nccl\n"
)


def test_a_hang_past_the_deadline_opens_a_stall_and_progress_resolves_it() -> None:
    clf = Classifier(RB, stall_deadlines={"distributed_init": 600})
    feed(clf, HANG, t0=1000.0)
    assert clf.tick(1000.0 + 300) == []  # within the deadline
    (opened,) = clf.tick(1000.0 + 900)
    inc = opened.incident
    assert opened.kind == "opened"
    assert (inc.tier, inc.category, inc.stage) == (
        "integration",
        "internode_network",
        "distributed_init",
    )
    assert "stalled in distributed_init for" in inc.primary.detail
    assert "world_size=2" in inc.primary.line
    assert clf.tick(1000.0 + 1200) == []  # one stall incident, not one per tick
    changes = feed(
        clf,
        "(VllmWorker rank=0 pid=70) INFO 07-21 05:20:00 [gpu_model_runner.py:1] "
        "Starting to load model Qwen/Qwen3-8B...",
        t0=2300.0,
    )
    assert [(c.kind, c.incident.id) for c in changes] == [("resolved", inc.id)]


def test_three_restarts_with_the_same_driver_failure_are_a_crash_loop() -> None:
    fail = (
        "INFO 03-12 14:55:20 [api_server.py:1] vLLM API server version 0.10.1\n"
        "INFO 03-12 14:55:20 [__init__.py:239] Automatically detected platform cuda.\n"
        "INFO 03-12 14:55:21 [core.py:1] Initializing a V1 LLM engine (v0.10.1) with config: "
        "model='x'\n"
        "RuntimeError: The NVIDIA driver on your system is too old (found version 12090).\n"
    )
    rep = report(fail * 3)
    (inc,) = rep["incidents"]
    assert inc["restarts"] == 2
    assert inc["extra"]["crash_loop"] is True
    assert inc["extra"]["restart_helps"] is False
    assert "restarting will not help" in inc["extra"]["note"]


def test_last_good_vs_now_shows_what_changed() -> None:
    good = HEALTHY_V1
    bad = good.replace("'max_model_len': 32768", "'max_model_len': 131072").replace(
        "max_seq_len=32768", "max_seq_len=131072"
    )
    bad_lines = bad.splitlines()[:17] + [
        "(EngineCore_0 pid=60) ERROR 07-21 05:30:00 [core.py:700] ValueError: To serve at least "
        "one request with the models's max seq len (131072), (20.00 GiB KV cache is needed, which "
        "is larger than the available KV cache memory (12.00 GiB)."
    ]
    rep = report(good + "\n".join(bad_lines))
    (inc,) = rep["incidents"]
    assert inc["category"] == "oom_kv_cache"
    assert inc["extra"]["changed_since_last_good"]["max_model_len"] == ["32768", "131072"]


def test_last_good_follows_the_workload_across_a_rollout() -> None:
    clf = Classifier(RB)
    meta1 = {"namespace": "llm", "pod": "qwen-7d9f8c6b5d-x2x4z", "container": "vllm"}
    meta2 = {"namespace": "llm", "pod": "qwen-5c4b3a2d1e-k9k8j", "container": "vllm"}
    feed(clf, HEALTHY_V1, stream="llm/qwen-7d9f8c6b5d-x2x4z/vllm", meta=meta1)
    bad = STARTUP.replace("0.10.1.1", "0.11.0") + (
        "(VllmWorker rank=0 pid=70) ERROR 07-21 04:58:56 [x.py:1] RuntimeError: NCCL error: "
        "unhandled system error (run with NCCL_DEBUG=INFO for details)\n"
    )
    changes = feed(clf, bad, stream="llm/qwen-5c4b3a2d1e-k9k8j/vllm", meta=meta2)
    inc = changes[0].incident
    assert inc.extra["changed_since_last_good"]["vllm_version"] == ["0.10.1.1", "0.11.0"]


def test_hybrid_model_disabling_prefix_caching_is_a_warning_not_a_page() -> None:
    lines = HEALTHY_V1.splitlines()
    lines.insert(
        5,
        "(APIServer pid=1) INFO 07-21 04:58:45 [config.py:1] Hybrid or mamba-based "
        "model detected without support for prefix caching: disabling.",
    )
    rep = report("\n".join(lines))
    assert rep["incidents"] == []  # a warning is not a failure
    (inc,) = rep["warnings"]
    assert (inc["severity"], inc["rule"]) == ("warning", "prefix-caching-disabled-hybrid")
    assert rep["status"] == "serving"


def test_kimi_k3_without_prefix_caching_warns_at_startup() -> None:
    log = (
        HEALTHY_V1.replace("Qwen/Qwen3-8B", "moonshotai/Kimi-K3")
        .replace(", 'enable_prefix_caching': True", "")
        .replace("enable_prefix_caching=True", "enable_prefix_caching=False")
    )
    rep = report(log)
    rules = {i["rule"]: i["severity"] for i in rep["warnings"]}
    assert rules == {"prefix-caching-off-kimi-k3": "warning"}
    assert report(HEALTHY_V1.replace("Qwen/Qwen3-8B", "moonshotai/Kimi-K3"))["warnings"] == []


def test_prefix_cache_hit_rate_stuck_at_zero_while_serving_warns() -> None:
    rep = report(HEALTHY_V1 + "\n".join(stats(5.0, 0, hit=0.0) for _ in range(6)))
    assert [i["rule"] for i in rep["warnings"]] == ["prefix-cache-hit-zero"]
    quiet = report(HEALTHY_V1 + "\n".join(stats(5.0, 0, hit=0.0, prompt=0.0) for _ in range(8)))
    assert quiet["warnings"] == []


def test_capacity_early_warnings_fire_on_their_case() -> None:
    saturated = report(HEALTHY_V1 + "\n".join(stats(97.0, 3) for _ in range(3)))
    assert [(i["rule"], i["severity"], i["category"]) for i in saturated["warnings"]] == [
        ("kv-cache-saturated", "warning", "oom_runtime")
    ]
    growing = report(HEALTHY_V1 + "\n".join(stats(60.0, w) for w in (2, 5, 9, 14, 22)))
    assert [i["rule"] for i in growing["warnings"]] == ["waiting-queue-growing"]
    preempted = report(HEALTHY_V1 + stats(80.0, 1, preempt=3))
    assert [i["rule"] for i in preempted["warnings"]] == ["requests-preempted"]
    tight = report(HEALTHY_V1.replace("24.53x", "1.25x"))
    assert [i["rule"] for i in tight["warnings"]] == ["kv-cache-barely-fits"]


def test_capacity_checks_stay_quiet_on_a_healthy_busy_server() -> None:
    busy = HEALTHY_V1 + "\n".join(stats(70.0 + i % 5, i % 3, hit=45.0) for i in range(30))
    assert report(busy)["incidents"] == [] and report(busy)["warnings"] == []


def test_playbook_is_attached_with_the_compatibility_decision() -> None:
    recs = [
        LogRecord(
            "s",
            "RuntimeError: The NVIDIA driver on your system is too old (found version 12090).",
            meta={"image": "vllm/vllm-openai:kimi-k3", "pod": "p"},
        )
    ]
    inc = classify_records(recs, Classifier(RB))[0]["incidents"][0]
    pb = inc["extra"]["playbook"]
    assert pb["owner"] == "platform team"
    options = {d["option"]: d for d in pb["decision"]}
    assert "rollback node" in options["driver_upgrade"]["preconditions"]
    assert options["cu129_bridge"]["available"] is False  # cu130-only image
    assert any("nvidia-smi" in e for e in pb["evidence"])
