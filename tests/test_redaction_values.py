"""Envelope values (stream names, pods, images, tags) are redacted through a bounded memo:
the same answer as redacting them each time, a secret masked on every record, and the
memo never grows past its bound."""

from __future__ import annotations

from typing import Any, cast

from service.classify import redaction
from service.classify.redaction import Redactor, load_redactor
from service.classify.rules import RULES_DIR
from service.records import Meta

SECRET = "hf_abcdefghijklmnopqrstuvwxyz0123456789"
VALUES = [
    "llm-prod",
    "vllm-qwen3-8b-7f9c6d5b4-x2kqp",
    f"registry.local/vllm:latest?token={SECRET}",
    f"kube.var.log.containers.x_{SECRET}.log",
    "docker.io/vllm/vllm-openai@sha256:0123456789abcdef",
    "plain",
]


def fresh() -> Redactor:
    return load_redactor(RULES_DIR)


def test_a_remembered_value_is_what_redacting_it_gives() -> None:
    red = fresh()
    once = [red.redact(v, counted=False) for v in VALUES]
    assert [red.redact_value(v) for v in VALUES] == once
    assert [red.redact_value(v) for v in VALUES] == once  # now from the memo
    assert all(SECRET not in v for v in once)


def test_every_record_of_a_stream_loses_the_secret_in_its_envelope() -> None:
    red = fresh()
    for _ in range(3):
        meta = cast(Meta, {"image": VALUES[2], "tag": VALUES[3], "pod": VALUES[1]})
        red.redact_meta(meta)
        plain = cast(dict[str, Any], meta)
        assert SECRET not in plain["image"] and SECRET not in plain["tag"]
        assert plain["pod"] == VALUES[1]


def test_the_memo_is_bounded(monkeypatch: Any) -> None:
    monkeypatch.setattr(redaction, "VALUE_CACHE", 10)
    red = fresh()
    for i in range(35):
        assert red.redact_value(f"pod-{i}") == f"pod-{i}"
        assert len(red._values) <= 10
    long = "x" * (redaction.VALUE_CACHE_MAX_CHARS + 1)
    red._values.clear()
    assert red.redact_value(long) == long
    assert red._values == {}  # a long value is redacted each time, never kept
