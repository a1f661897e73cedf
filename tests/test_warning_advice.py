"""Warnings carry their own explanation and first move from the rules data
(rules/playbook.yaml ``warnings``), never their category's, with the numbers that triggered
them. The real captures that prove each one are in tests/test_operational_captures.py."""

from __future__ import annotations

import re

import pytest

from service.classify.engine import Classifier
from service.classify.judgements import serving
from service.classify.rulebook import RuleBook
from service.classify.rules import RULES_DIR, load_playbook
from service.classify.run_state import ServingStats
from service.offline.report import classify_records
from service.records import LogRecord
from tests.test_engine import HEALTHY_V1

RB = RuleBook()
PLAYBOOK = load_playbook(RULES_DIR)
STATS_RULES = (
    "kv-cache-saturated",
    "waiting-queue-growing",
    "requests-preempted",
    "prefix-cache-hit-zero",
)


def report(text: str) -> dict:
    return classify_records([LogRecord("s", t) for t in text.splitlines()], Classifier(RB))[0]


def stats(
    kv: float,
    waiting: int,
    hit: float = 10.0,
    prompt: float = 100.0,
    preempt: int | None = None,
    running: int = 8,
) -> str:
    pre = f", Preemptions: {preempt}" if preempt is not None else ""
    return (
        f"(APIServer pid=1) INFO 07-21 05:00:10 [loggers.py:123] Engine 000: Avg prompt "
        f"throughput: {prompt} tokens/s, Avg generation throughput: 35.1 tokens/s, Running: "
        f"{running} reqs, Waiting: {waiting} reqs{pre}, GPU KV cache usage: {kv}%, Prefix cache "
        f"hit rate: {hit}%"
    )


def category_move(category: str) -> str:
    return " ".join(str(PLAYBOOK["categories"][category]["first_move"]).split())


def own(rule: str) -> dict:
    entry = PLAYBOOK["warnings"][rule]
    return {k: " ".join(str(entry[k]).split()) for k in ("explanation", "first_move")}


def test_every_warning_kind_has_its_own_entry() -> None:
    warning_sigs = [s.id for s in RB.signatures if s.role == "warning"]
    assert set(warning_sigs) | set(STATS_RULES) | {"prefix-caching-off-kimi-k3"} <= set(
        PLAYBOOK["warnings"]
    )
    for rule, entry in PLAYBOOK["warnings"].items():
        assert entry.get("explanation") and entry.get("first_move"), rule
        for category, e in PLAYBOOK["categories"].items():
            assert " ".join(entry["first_move"].split()) != " ".join(
                str(e["first_move"]).split()
            ), (rule, category)


@pytest.mark.parametrize(
    "log, rule, numbers",
    [
        (
            HEALTHY_V1 + "\n".join(stats(kv, 3) for kv in (96.0, 97.0, 97.5)),
            "kv-cache-saturated",
            r"GPU KV cache usage ≥ 95% on the last 3 stats lines \(96\.0%, 97\.0%, 97\.5%\); "
            r"8 running, 3 waiting",
        ),
        (
            HEALTHY_V1 + "\n".join(stats(60.0, w) for w in (2, 5, 9, 14, 22)),
            "waiting-queue-growing",
            r"grew on the last 5 stats lines: 0 → 2 → 5 → 9 → 14 \(8 running, GPU KV cache usage "
            r"60\.0%\)",
        ),
        (
            HEALTHY_V1 + stats(80.0, 1, preempt=3),
            "requests-preempted",
            r"3 preemptions in one stats interval \(GPU KV cache usage 80\.0%",
        ),
        (
            HEALTHY_V1 + "\n".join(stats(5.0, 0, hit=0.0, prompt=100.0 + i) for i in range(6)),
            "prefix-cache-hit-zero",
            r"prefix cache hit rate 0\.0% on the last 6 stats lines .*100, 101, 102, 103, 104, 105 "
            r"tokens/s",
        ),
        (
            HEALTHY_V1.replace("24.53x", "1.25x"),
            "kv-cache-barely-fits",
            r"holds 1\.25x a full-length request of 32,768 tokens",
        ),
    ],
)
def test_each_warning_explains_itself_with_its_numbers(log: str, rule: str, numbers: str) -> None:
    rep = report(log)
    assert rep["incidents"] == []
    (w,) = rep["warnings"]
    assert (w["rule"], w["severity"]) == (rule, "warning")
    advice = own(rule)
    assert w["remediation"] == advice["first_move"]
    assert w["remediation"] != category_move(w["category"])
    assert w["explanation"] == advice["explanation"]
    assert w["extra"]["playbook"]["first_move"] == advice["first_move"]
    assert re.search(numbers, w["detail"]), w["detail"]


def test_prefix_caching_off_where_it_should_be_on_has_its_own_advice() -> None:
    log = (
        HEALTHY_V1.replace("Qwen/Qwen3-8B", "moonshotai/Kimi-K3")
        .replace(", 'enable_prefix_caching': True", "")
        .replace("enable_prefix_caching=True", "enable_prefix_caching=False")
    )
    (w,) = report(log)["warnings"]
    assert w["rule"] == "prefix-caching-off-kimi-k3"
    assert w["remediation"] == own("prefix-caching-off-kimi-k3")["first_move"]
    assert "--enable-prefix-caching" in w["remediation"]
    assert w["remediation"] != category_move("config_error")


def test_prefix_caching_disabled_by_vllm_has_its_own_advice() -> None:
    lines = HEALTHY_V1.splitlines()
    lines.insert(
        5,
        "(APIServer pid=1) INFO 07-21 04:58:45 [config.py:1] Hybrid or mamba-based "
        "model detected without support for prefix caching: disabling.",
    )
    (w,) = report("\n".join(lines))["warnings"]
    assert w["rule"] == "prefix-caching-disabled-hybrid"
    assert w["remediation"] == own("prefix-caching-disabled-hybrid")["first_move"]
    assert w["explanation"] == own("prefix-caching-disabled-hybrid")["explanation"]


def test_stats_lines_of_the_cpu_build_and_newer_fields_are_read() -> None:
    state = ServingStats()
    line = (
        "Engine 000: Avg prompt throughput: 12.0 tokens/s, Avg generation throughput: "
        "40.0 tokens/s, Running: 2 reqs, Waiting: 7 reqs, Deferred: 1 reqs, KV fetch: 0 "
        "waiting to start, 1 in progress, 0 completed waiting, Preemptions: 4, CPU KV cache "
        "usage: 99.2%, Prefix cache hit rate: 0.0%"
    )
    (j,) = serving.judge(line, state, False, RuleBook().judgements.serving)
    assert j.rule == "requests-preempted" and "CPU KV cache usage 99.2%" in j.detail
