"""Notification stages without a database: routing, silences, rendering, signing, retry
schedule, rate limit. Incidents come from real logs through the real classifier."""

from __future__ import annotations

import json
import random
import time
from typing import Any

import pytest

from service.config import ReceiverSettings
from service.labels import validate
from service.notify import pagerduty, slack, webhook
from service.notify.alert import Alert
from service.notify.outbox import backoff, make_route, message_kind
from service.notify.ratelimit import TokenBucket
from service.notify.routing import Router, incident_labels
from service.notify.silences import silenced_by
from service.records import LogRecord
from service.store import Claim, ClaimedEvent
from tests.test_store import CORPUS, REAL, classifier, k8s, kafka_records

URL = "https://sentinel.example.com"


def incident_from(
    path: Any, meta: dict[str, Any] | None = None, extra: list[str] = ()
) -> dict[str, Any]:
    """The last incident a real log produces, as Incident.to_dict()."""
    clf = classifier()
    recs = kafka_records(path, stream="ns/pod/vllm", meta=meta)
    recs += [LogRecord("ns/pod/vllm", line, None, dict(meta or {})) for line in extra]
    last = None
    for r in recs:
        for ch in clf.feed(r):
            last = ch.incident
    assert last is not None
    return last.to_dict()


@pytest.fixture(scope="module")
def oom() -> dict[str, Any]:
    return incident_from(
        REAL / "kv-cache-too-small.cri.log",
        k8s("prod", "llama-70b-0", node="gpu-a100-7", team="inference"),
    )


def receiver(name: str = "r", **kw: Any) -> ReceiverSettings:
    return ReceiverSettings(name=name, type=kw.pop("type", "webhook"), url="http://x", **kw)


# ---- routing -------------------------------------------------------------------------------
def test_default_route_is_critical_only(oom: dict[str, Any]) -> None:
    r = Router([receiver("all"), receiver("warn", match={"severity": ["warning"]})])
    assert [x.name for x in r.receivers_for(oom)] == ["all"]
    warning = {**oom, "severity": "warning"}
    assert [x.name for x in r.receivers_for(warning)] == ["warn"]
    assert not Router([receiver("all")]).wants(warning, "opened")


def test_route_by_tier_namespace_node_and_label(oom: dict[str, Any]) -> None:
    r = Router(
        [
            receiver("capacity", match={"tier": ["capacity"]}),
            receiver("compat", match={"tier": ["compatibility"]}),
            receiver("prod", match={"namespace": ["prod", "prod-*"]}),
            receiver("staging", match={"namespace": ["staging"]}),
            receiver("a100", match={"node": ["gpu-a100-*"], "label:team": ["inference"]}),
            receiver("other-team", match={"label:team": ["search"]}),
        ]
    )
    assert [x.name for x in r.receivers_for(oom)] == ["capacity", "prod", "a100"]


def test_engaged_receivers_hear_updates_and_resolution(oom: dict[str, Any]) -> None:
    r = Router(
        [
            receiver("capacity", match={"tier": ["capacity"]}),
            receiver("quiet", match={"tier": ["compatibility"]}, send_resolved=False),
        ]
    )
    route = make_route(r)
    moved = {**oom, "primary": {**oom["primary"], "tier": "compatibility"}}
    assert [t[0] for t in route(moved, "updated", {"capacity"})] == ["capacity", "quiet"]
    resolved = route({**moved, "status": "resolved"}, "resolved", {"capacity", "quiet"})
    assert resolved == [
        ("capacity", "pending", None),
        ("quiet", "dropped", "send_resolved is off for this receiver"),
    ]


def test_matchers_validate() -> None:
    assert validate({"tier": "capacity"}) == {"tier": ["capacity"]}
    for bad in ({}, {"colour": ["x"]}, {"tier": []}, {"label:": ["x"]}, ["tier"]):
        with pytest.raises(ValueError):
            validate(bad)


# ---- silences ------------------------------------------------------------------------------
def test_silence_matches_within_its_window(oom: dict[str, Any]) -> None:
    now = time.time()
    s = {
        "id": "s1",
        "matchers": {"namespace": ["prod"], "category": ["oom_*"]},
        "starts_at": now - 10,
        "ends_at": now + 10,
    }
    assert silenced_by([s], oom, "r", now) is s
    assert silenced_by([s], oom, "r", now + 11) is None  # expired
    assert silenced_by([s], oom, "r", now - 11) is None  # not started
    only_slack = {**s, "matchers": {"receiver": ["slack"]}}
    assert silenced_by([only_slack], oom, "slack", now) is only_slack
    assert silenced_by([only_slack], oom, "pd", now) is None
    assert incident_labels(oom)["label:team"] == "inference"


# ---- rendering -----------------------------------------------------------------------------
def _blocks_within_limits(msg: dict[str, Any]) -> None:
    blocks = msg["blocks"]
    assert 0 < len(blocks) <= slack.MAX_BLOCKS
    assert len(msg["text"]) <= slack.TEXT_MAX
    for b in blocks:
        if b["type"] == "header":
            assert len(b["text"]["text"]) <= slack.HEADER_MAX
        if "text" in b and b["type"] == "section":
            assert len(b["text"]["text"]) <= slack.SECTION_MAX
        for f in b.get("fields", []):
            assert len(f["text"]) <= slack.FIELD_MAX
        assert len(b.get("fields", [])) <= 10
        if b["type"] == "section" and "```" in b.get("text", {}).get("text", ""):
            assert b["text"]["text"].count("```") == 2  # code block stays closed


def test_slack_message_has_what_on_call_needs(oom: dict[str, Any]) -> None:
    msg = slack.message(Alert("opened", oom, 1, URL))
    _blocks_within_limits(msg)
    flat = json.dumps(msg)
    header = msg["blocks"][0]["text"]["text"]
    assert "FIRING" in header and "capacity" in header and "oom_kv_cache" in header
    assert "prod/llama-70b-0" in flat and "gpu-a100-7" in flat
    assert "*Root cause*\\n```" in flat and "*First move*" in flat and "*Evidence*" in flat
    assert f"{URL}/ui/incidents/{oom['id']}" in flat
    assert "[FIRING]" in msg["text"]
    done = slack.message(
        Alert("resolved", {**oom, "status": "resolved", "resolution": "run 2 got ready"}, 2, URL)
    )
    assert "RESOLVED" in done["blocks"][0]["text"]["text"] and "run 2 got ready" in json.dumps(done)


def test_slack_stays_within_limits_for_a_huge_traceback() -> None:
    frames = []
    for i in range(400):
        frames.append(
            f'  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/'
            f'gpu_model_runner_{i}.py", line {i + 100}, in execute_model'
        )
        frames.append("    " + "hidden_states = self.model(input_ids, positions) " * 40)
    huge = "torch.OutOfMemoryError: CUDA out of memory. " + "x<&>`" * 30_000
    inc = incident_from(
        CORPUS / "gh-club3090-138-oom-runtime-worker-tp0.log",
        k8s("prod", "p" * 300, node="n" * 300),
        extra=frames + [huge],
    )
    inc["primary"]["line"] = huge  # the root-cause line itself is enormous
    inc["facts"] = {"image": "vllm/vllm-openai:" + "v" * 5000, "gpu_model": "NVIDIA A100"}
    msg = slack.message(Alert("opened", inc, 1, URL))
    _blocks_within_limits(msg)
    assert len(json.dumps(msg)) < 40_000
    assert "&lt;&amp;&gt;" in json.dumps(msg)  # mrkdwn control characters escaped


def test_webhook_signature_verifies_and_tampering_fails(oom: dict[str, Any]) -> None:
    cfg = receiver(secret="s3cret")
    now = time.time()
    req = webhook.build(Alert("opened", oom, 3, URL), cfg, now)
    ts, sig = req.headers["X-Sentinel-Timestamp"], req.headers["X-Sentinel-Signature"]
    assert sig.startswith("sha256=") and req.headers["X-Sentinel-Event-Id"] == f"{oom['id']}.v3"
    assert webhook.verify_signature("s3cret", ts, req.body, sig)
    assert webhook.verify_signature("s3cret", ts, req.body, sig, max_age_s=300, now=now)
    assert not webhook.verify_signature("s3cret", ts, req.body, sig, max_age_s=300, now=now + 3600)
    tampered = req.body.replace(b'"oom_kv_cache"', b'"oom_runtime"', 1)
    assert tampered != req.body
    assert not webhook.verify_signature("s3cret", ts, tampered, sig)
    assert not webhook.verify_signature("wrong", ts, req.body, sig)
    assert not webhook.verify_signature("s3cret", str(int(ts) + 1), req.body, sig)
    assert not webhook.verify_signature("s3cret", ts, req.body, None)
    body = json.loads(req.body)
    assert body["version"] == 1 and body["event"] == "opened"
    inc = body["incident"]
    assert inc["id"] == oom["id"] and inc["version"] == 3 and inc["stream"] == "ns/pod/vllm"
    assert inc["meta"]["namespace"] == "prod" and "timeline" in inc and "facts" in inc
    assert (
        "X-Sentinel-Signature"
        not in webhook.build(Alert("opened", oom, 3, URL), receiver(), now).headers
    )


def test_pagerduty_trigger_then_resolve_share_the_dedup_key(oom: dict[str, Any]) -> None:
    cfg = receiver(type="pagerduty", routing_key="R0UTING")
    trig = json.loads(pagerduty.build(Alert("opened", oom, 1, URL), cfg, 0).body)
    res = json.loads(
        pagerduty.build(Alert("resolved", {**oom, "status": "resolved"}, 2, URL), cfg, 0).body
    )
    assert (trig["event_action"], res["event_action"]) == ("trigger", "resolve")
    assert trig["dedup_key"] == res["dedup_key"] == oom["id"]
    assert trig["routing_key"] == "R0UTING"
    p = trig["payload"]
    assert len(p["summary"]) <= 1024 and p["severity"] == "critical"
    assert p["source"] == "llama-70b-0" and p["group"] == "prod" and p["class"] == "oom_kv_cache"
    assert p["custom_details"]["first_move"] and trig["links"][0]["href"].endswith(oom["id"])
    long = {**oom, "primary": {**oom["primary"], "line": "E" * 10_000}, "severity": "warning"}
    p2 = pagerduty.event(Alert("updated", long, 2, URL), "k")["payload"]
    assert len(p2["summary"]) == 1024 and p2["severity"] == "warning"


# ---- delivery schedule ---------------------------------------------------------------------
def _claim(kinds: list[str], status: str = "open", first: bool = True) -> Claim:
    return Claim(
        "r",
        {"id": "i", "status": status},
        len(kinds),
        list(range(len(kinds))),
        [ClaimedEvent(i, i + 1, k, 0.0) for i, k in enumerate(kinds)],
        first=first,
    )


def test_message_kind() -> None:
    assert message_kind(_claim(["opened"])) == "opened"
    assert message_kind(_claim(["opened", "updated"])) == "opened"
    assert message_kind(_claim(["updated"], first=False)) == "updated"
    assert message_kind(_claim(["updated"])) == "opened"  # first news for this receiver
    assert message_kind(_claim(["updated", "resolved"], "resolved", first=False)) == "resolved"
    assert message_kind(_claim(["opened", "resolved"], "resolved")) == "resolved"
    assert message_kind(_claim(["resolved"], "resolved")) is None  # never told: nothing to say


def test_backoff_is_exponential_with_full_jitter() -> None:
    rng = random.Random(7)
    for attempt in range(1, 12):
        ceiling = min(300.0, 1.0 * 2 ** (attempt - 1))
        xs = [backoff(attempt, 1.0, 300.0, rng) for _ in range(200)]
        assert all(0 <= x <= ceiling for x in xs)
        assert max(xs) > ceiling * 0.8 and min(xs) < ceiling * 0.2  # the whole range
    assert backoff(1, 1.0, 300.0, rng, at_least=30.0) >= 30.0  # Retry-After wins


def test_token_bucket_waits_instead_of_dropping() -> None:
    b = TokenBucket(per_minute=600)  # 10/s, burst 100
    assert b.available() == 100
    for _ in range(100):
        b.take()
    assert b.wait_time() > 0
    time.sleep(0.25)
    assert 1 <= b.available() <= 3
