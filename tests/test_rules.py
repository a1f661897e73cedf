"""Every rule's own examples: each signature matches its positives and none of its
negatives; every stage and fact pattern matches its example."""

from __future__ import annotations

import pytest

from service.classify.rulebook import RuleBook
from service.classify.rules import load_fact_rules, load_signatures, load_stage_rules
from service.parse.line import parse_line
from service.taxonomy import CATEGORY_TIER

SIGNATURES = load_signatures()
STAGES = load_stage_rules()
FACTS = load_fact_rules()


def _matching_ids(rb: RuleBook, text: str) -> list[str]:
    line = parse_line(text)
    hits = rb.scan(line.message).signatures
    return [
        s.id for s, _ in hits if s.levels is None or line.level is None or line.level in s.levels
    ]


@pytest.mark.parametrize("sig", SIGNATURES, ids=[s.id for s in SIGNATURES])
def test_signature_matches_its_positive_examples(rulebook: RuleBook, sig) -> None:
    for example in sig.examples.match:
        assert sig.id in _matching_ids(rulebook, example), example


@pytest.mark.parametrize("sig", SIGNATURES, ids=[s.id for s in SIGNATURES])
def test_signature_ignores_its_negative_examples(rulebook: RuleBook, sig) -> None:
    for example in sig.examples.no_match:
        assert sig.id not in _matching_ids(rulebook, example), example


def test_every_failure_category_has_a_signature() -> None:
    covered = {s.category for s in SIGNATURES} | {
        c for s in SIGNATURES for c in s.category_by_stage.values()
    }
    missing = set(CATEGORY_TIER) - covered - {"healthy"}
    assert not missing


def test_signature_ids_are_unique_and_have_remediation() -> None:
    ids = [s.id for s in SIGNATURES]
    assert len(ids) == len(set(ids))
    assert all(s.remediation or s.role == "cascade" for s in SIGNATURES)


@pytest.mark.parametrize("stage", list(STAGES.stages))
def test_stage_patterns_match_their_examples(rulebook: RuleBook, stage: str) -> None:
    for pat in STAGES.stages[stage]:
        assert stage in rulebook.scan(parse_line(pat.example).message).stages, pat.example


@pytest.mark.parametrize("name", list(FACTS.facts))
def test_fact_patterns_extract_their_expected_value(rulebook: RuleBook, name: str) -> None:
    for fp in FACTS.facts[name]:
        facts = rulebook.scan(parse_line(fp.example).message).facts
        values = [v for n, v in facts if n == name]
        expect = fp.expect
        if name == "driver_cuda" and expect.isdigit():
            expect = f"{int(expect) // 1000}.{(int(expect) % 1000) // 10}"
        if name == "image_cuda" and expect.isdigit():
            expect = f"{expect[:-1]}.{expect[-1]}"
        if name == "image_cuda":
            expect = ".".join(expect.split(".")[:2])
        assert expect in values, (fp.example, facts)


def test_benign_serving_line_hits_no_signature(rulebook: RuleBook) -> None:
    line = parse_line(
        '(APIServer pid=1) INFO:     10.0.0.7:54182 - "POST /v1/chat/completions HTTP/1.1" 200 OK'
    )
    hits = rulebook.scan(line.message)
    assert hits.signatures == [] and hits.serving


def test_every_failure_category_has_a_default_stage() -> None:
    missing = set(CATEGORY_TIER) - set(STAGES.default_stage) - {"healthy"}
    assert not missing


def test_benign_examples_are_recognised_and_raise_nothing(rulebook: RuleBook) -> None:
    from service.classify.engine import Classifier
    from service.classify.rules import load_benign
    from service.records import LogRecord

    for b in load_benign():
        assert rulebook.scan(parse_line(b.example).message).benign, b.example
        clf = Classifier(rulebook)
        assert clf.feed(LogRecord("s", b.example)) == [], b.example
