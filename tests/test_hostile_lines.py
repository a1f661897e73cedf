"""Crafted megabyte lines, one per family of pattern in the code and the rules, cost what
8 KiB costs: the parser, masking, the rules, the text model and the whole service stay
responsive, and the whole line is still kept as evidence."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from service.api.timespec import MAX_LEN, parse_duration, parse_instant
from service.classify.loader import build_classifier
from service.classify.redaction import LINE_CAP as REDACT_CAP
from service.classify.rules import RULES_DIR, load_signatures
from service.classify.signatures import derive_literals
from service.parse.line import PATTERN_CAP, parse_line
from service.parse.masking import LINE_CAP, mask
from tests.e2e_support import Sentinel, free_port, service_config

MB = 1_000_000
HEADER = "(VllmWorker rank=1 pid=42) ERROR 01-01 00:00:00 [core.py:1] "
# One seed per family of construct the patterns of service/ and rules/ are built from:
# words, spaces, brackets, prefixes, timestamps, paths, hosts, sizes, numbers, quotes, ANSI.
SEEDS = [
    "a",
    " ",
    "\t",
    "a ",
    "(",
    "(a pid=1) ",
    "[",
    "0",
    "00-",
    "0:",
    "-",
    "a.",
    "a:",
    ":",
    ".py:",
    'File "',
    "\x1b[",
    "[1;",
    "| ",
    "a | ",
    "a - ",
    "a/",
    "=",
    "a=",
    "'",
    '"',
    ", ",
    "x@",
    "1.",
    "rank=1 ",
    "[rank0]: ",
    "NCCL ",
    "_",
    "Error",
    "0.0.",
    "E1203 ",
    "ERROR ",
    "{",
    "0x",
    "1 GiB ",
    "1.1.1.1:",
    "a:1:",
    "a::",
    "host=",
    "'a/",
    "../",
    "v1.",
    "[00:00<",
    "1 s",
    "CUDA out of memory ",
    "NCCL error ",
    "\\",
]
SUFFIXES = ["\x00!", " [repeated 3x across cluster]", "Error"]


def crafted(seed: str, prefix: str = "", suffix: str = "") -> str:
    return prefix + (seed * (MB // len(seed) + 1))[:MB] + suffix


def rule_literals() -> list[str]:
    """The fixed strings the signatures look for: a line repeating them wakes every rule."""
    lits = []
    for sig in load_signatures(RULES_DIR):
        lits.extend(sig.literals or derive_literals(sig.pattern) or [])
    return sorted(set(lits))


@pytest.mark.parametrize("seed", SEEDS)
def test_patterns_see_a_bounded_prefix_and_evidence_keeps_the_line(seed: str) -> None:
    for prefix in ("", HEADER):
        for suffix in SUFFIXES:
            text = crafted(seed, prefix, suffix)
            line = parse_line(text)
            assert len(line.message) <= PATTERN_CAP
            assert line.text.endswith(suffix.rstrip("\r\n")) and len(line.text) >= MB
            assert mask(text) == mask(text[:LINE_CAP])  # masking saw only the cap


def test_the_classifier_takes_a_megabyte_of_every_rule_literal() -> None:
    clf = build_classifier()
    st = clf.state("hostile")
    lits = " ".join(rule_literals())
    text = HEADER + "RuntimeError: " + (lits + " ") * (MB // (len(lits) + 1))
    for _ in range(3):
        clf.feed_text(st, text)
    assert st.incidents, "a failure-looking line still opens an incident"
    (evidence,) = st.incidents[0].to_dict()["evidence"]
    # the door (rules/redaction.yaml, #20) keeps the line up to the store's own cap: past it
    # no pattern could vouch for the rest having no secret
    assert evidence == text[: REDACT_CAP - 1] + "…"


def test_time_and_duration_parameters_are_bounded() -> None:
    for fn in (parse_duration, parse_instant):
        with pytest.raises(ValueError, match="longer than"):
            fn("0" * (MAX_LEN + 1))
    assert parse_duration("1h30m") == 5400.0


# ---- the running service ---------------------------------------------------------------
@pytest.fixture
def sentinel(tmp_path: Path) -> Iterator[Sentinel]:
    port = free_port()
    cfg = service_config(
        store_url=f"sqlite:///{tmp_path}/s.db", api_port=port, token="hostile-test-token-0123456789"
    )
    s = Sentinel(tmp_path, "hostile", cfg)
    s.start().wait_ready()
    yield s
    s.terminate()
    s.close()


def test_probes_answer_while_crafted_lines_arrive_and_a_real_oom_still_opens(
    sentinel: Sentinel,
) -> None:
    """Every family of crafted 1 MB line goes in through /classify and /ingest while the
    liveness probe is polled with the deployment's probe timeout (5 s): none may miss."""
    auth = {"Authorization": f"Bearer {sentinel.token}"}
    base = f"http://127.0.0.1:{sentinel.api_port}"
    done = threading.Event()
    errors: list[str] = []

    def attack() -> None:
        try:
            with httpx.Client(base_url=base, headers=auth, timeout=120) as c:
                for seed in SEEDS:
                    body = crafted(seed, HEADER, " Error").encode("utf-8", "replace")
                    r = c.post("/classify", content=body, headers={"Content-Type": "text/plain"})
                    if r.status_code >= 500:
                        errors.append(f"/classify {seed!r}: {r.status_code}")
                    r = c.post(
                        "/ingest",
                        content=body,
                        params={"tag": f"hostile.{len(seed)}"},
                        headers={"Content-Type": "text/plain"},
                    )
                    if r.status_code >= 500:
                        errors.append(f"/ingest {seed!r}: {r.status_code}")
        finally:
            done.set()

    attacker = threading.Thread(target=attack, daemon=True)
    attacker.start()
    probes = 0
    with httpx.Client(base_url=base, timeout=5.0) as probe:
        while not done.wait(0.2):
            assert probe.get("/healthz").status_code == 200  # a timeout raises: the test fails
            probes += 1
    attacker.join()
    assert not errors, errors
    assert probes > 5

    oom = (
        HEADER + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
        "GPU 0 has a total capacity of 79.15 GiB of which 1.12 GiB is free."
    )
    with httpx.Client(base_url=base, headers=auth, timeout=30) as c:
        r = c.post(
            "/ingest",
            content=oom.encode(),
            params={"tag": "after.the.attack"},
            headers={"Content-Type": "text/plain"},
        )
        assert r.status_code in (200, 202), r.text
        found = c.get("/incidents").json()
    items = found["items"] if isinstance(found, dict) else found
    oom_incidents = [i for i in items if "after.the.attack" in i["stream"]]
    assert oom_incidents and oom_incidents[0]["tier"] == "capacity", items
