"""Redaction at the door (#20): the patterns of rules/redaction.yaml and their examples, the
count in /metrics, a key printed over several lines, a team's patterns, and the one door:
no planted secret in ``classify --json``, in the store's rows, in ``GET /incidents`` or the
dashboard, in the quarantine. The real service and its pages: tests/test_e2e_redaction.py."""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from service import metrics, ratelog
from service.app import web_app
from service.classify.engine import Classifier
from service.classify.redaction import Blocks, Redactor, load_redactor
from service.classify.rulebook import RuleBook
from service.classify.rules import RULES_DIR
from service.classify.ruletest import RuleLoadError, load_rule_set
from service.cli import main
from service.offline.report import classify_records
from service.records import LogRecord, Position
from tests.api_support import WRITE, close_context, json_array, make_context
from tests.secrets_support import SECRETS, dump_tables, leaked, secret_lines, write_secret_log

SHIPPED = load_redactor(RULES_DIR)


@pytest.mark.parametrize("name", [p.name for p in SHIPPED.patterns])
def test_every_shipped_pattern_passes_its_examples(name: str) -> None:
    assert SHIPPED.check_examples([name]) == []


def test_the_shipped_patterns_cover_the_shapes_issue_20_names() -> None:
    names = {p.name for p in SHIPPED.patterns}
    assert {
        "private_key",
        "authorization_header",
        "bearer",
        "secret_named_key",
        "env_secret",
        "url_credentials",
        "jwt",
        "webhook_url",
        "cookie",
        "huggingface_token",
        "openai_key",
        "aws_access_key_id",
        "github_token",
    } <= names
    for p in SHIPPED.patterns:
        assert p.examples.match and p.examples.no_match, p.name


def test_a_failing_example_is_reported() -> None:
    bad = SHIPPED.patterns[0].model_copy(
        update={"examples": SHIPPED.patterns[0].examples.model_copy(update={"no_match": ["x"]})}
    )
    lax = bad.model_copy(update={"pattern": "x"})
    assert Redactor([lax]).check_examples() != []


def value(pattern: str) -> float:
    return metrics.REGISTRY.get_sample_value("sentinel_redactions_total", {"pattern": pattern}) or 0


def test_redactions_are_counted_per_pattern_and_never_twice() -> None:
    r = load_redactor(RULES_DIR)
    before = value("huggingface_token")
    once = r.redact(f"login with {SECRETS[0]} and {SECRETS[1]}")
    assert value("huggingface_token") == before + 2
    assert r.redact(once) == once  # idempotent: a redacted line is not counted again
    assert value("huggingface_token") == before + 2


def test_a_key_printed_over_several_lines_is_redacted_to_its_end_in_its_own_stream() -> None:
    r = load_redactor(RULES_DIR)
    blocks: Blocks = OrderedDict()
    body = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gunVTLw"
    assert (
        r.redact("-----BEGIN RSA PRIVATE KEY-----", "a", blocks)
        == "-----BEGIN RSA PRIVATE KEY-----"
    )
    assert r.redact(body, "b", blocks) == body  # another stream is not in the block
    assert r.redact(body, "a", blocks) == "<REDACTED>"
    assert r.redact("-----END RSA PRIVATE KEY-----", "a", blocks).endswith(
        "-----END RSA PRIVATE KEY-----"
    )
    assert r.redact("INFO next line", "a", blocks) == "INFO next line"  # the block closed


def team_dir(tmp_path: Path, patterns: list[dict[str, object]]) -> Path:
    d = tmp_path / "team"
    d.mkdir(parents=True)
    (d / "redaction.yaml").write_text(yaml.safe_dump({"patterns": patterns}))
    return d


INTERNAL = {
    "name": "acme_token",
    "pattern": r"\b(?P<secret>acme_[a-z0-9]{12,})",
    "literals": ["acme_"],
    "examples": {
        "match": [{"text": "token acme_abcdef123456789 refused", "secret": "acme_abcdef123456789"}],
        "no_match": ["INFO acme_ prefix"],
    },
}


def test_a_team_adds_a_pattern_and_its_examples_are_run(tmp_path: Path) -> None:
    rs = load_rule_set([team_dir(tmp_path, [INTERNAL])])
    rb = rs.rulebook()
    assert rb.redactor.redact("got acme_abcdef123456789") == "got <REDACTED>"
    assert rb.redactor.redact(f"hf {SECRETS[0]}") == "hf <REDACTED>"  # shipped ones stay
    broken = {**INTERNAL, "examples": {**INTERNAL["examples"], "no_match": ["acme_zzzzzzzzzzzzzz"]}}  # type: ignore[dict-item]
    with pytest.raises(RuleLoadError, match="acme_token: changes its no_match example"):
        load_rule_set([team_dir(tmp_path / "b", [broken])])


def test_a_secret_never_in_its_example_text_is_refused(tmp_path: Path) -> None:
    wrong = {**INTERNAL, "examples": {"match": [{"text": "x", "secret": "y"}], "no_match": ["z"]}}
    with pytest.raises(RuleLoadError, match="is not in its example text"):
        load_rule_set([team_dir(tmp_path, [wrong])])


# ---- the door ------------------------------------------------------------------------------
def test_cli_classify_json_carries_no_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = write_secret_log(tmp_path / "secret.log")
    assert main(["classify", "--json", str(log)]) == 1  # a failure was found
    out = capsys.readouterr().out
    assert leaked(out) == []
    (report,) = [json.loads(x) for x in out.splitlines() if x.strip()]
    (inc,) = report["incidents"]
    assert inc["category"] == "model_unavailable"  # the classification is unchanged
    assert "token=<REDACTED>" in inc["line"]
    assert "'hf_token': '<REDACTED>'" in report["facts"]["non_default_args"]
    assert report["facts"]["model"] == "some-org/missing-model"


def test_without_the_door_the_same_log_leaks() -> None:
    """The guard above can fail: with no pattern the planted secrets reach the incident."""
    rb = RuleBook()
    rb.redactor = Redactor([])
    recs = [LogRecord("s", line) for line in secret_lines()]
    reports = classify_records(recs, Classifier(rb))
    assert leaked(json.dumps(reports, default=str)) != []


def test_ingest_stores_and_serves_no_secret(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    ctx = make_context(db, RuleBook())
    records = [
        {
            "log": line,
            "kubernetes": {"namespace_name": "llm", "pod_name": "p-0", "container_name": "vllm"},
        }
        for line in secret_lines()
    ]
    try:
        with TestClient(web_app(ctx)) as c:
            r = c.post(
                "/ingest",
                content=json_array(records),
                headers={**WRITE, "Content-Type": "application/json"},
            )
            assert r.status_code == 200, r.text
            items = c.get("/incidents").json()["items"]
            assert [i["category"] for i in items] == ["model_unavailable"]
            detail = c.get(f"/incidents/{items[0]['id']}")
            page = c.get(f"/ui/incidents/{items[0]['id']}")
            assert page.status_code == 200
            for body in (json.dumps(items), detail.text, page.text, c.get("/streams").text):
                assert leaked(body) == []
            assert "&lt;REDACTED&gt;" in page.text or "<REDACTED>" in page.text
    finally:
        close_context(ctx)
    assert leaked(dump_tables(f"sqlite:///{db}")) == []


def test_a_quarantined_record_keeps_no_secret(tmp_path: Path) -> None:
    ctx = make_context(tmp_path / "s.db", RuleBook())
    try:
        rec = LogRecord("a/b/c", f"boom {SECRETS[0]}", position=Position("file", "x", 1))
        row = ctx.pipeline._quarantine(rec, "file", ValueError(f"bad line {SECRETS[1]}"))
        assert leaked(json.dumps(row)) == []
    finally:
        close_context(ctx)


def test_rules_test_runs_a_team_s_redaction_examples(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = team_dir(tmp_path / "good", [INTERNAL])
    assert main(["rules", "test", str(good)]) == 0
    assert "redaction patterns" in capsys.readouterr().out
    broken = {**INTERNAL, "examples": {**INTERNAL["examples"], "no_match": ["acme_zzzzzzzzzzzzzz"]}}  # type: ignore[dict-item]
    assert main(["rules", "test", str(team_dir(tmp_path / "bad", [broken]))]) != 0
    assert "changes its no_match example" in capsys.readouterr().err


def test_a_rejected_line_is_logged_masked(caplog: pytest.LogCaptureFixture) -> None:
    ratelog.REJECTS_LOG.limiter._keys.clear()
    ratelog.redact_details_with(load_redactor(RULES_DIR).redact)
    try:
        with caplog.at_level(logging.WARNING, logger="vllm_sentinel.rejects"):
            ratelog.reject("test", "bad_cri", f"garbage ?token={SECRETS[1]} \udcff")
    finally:
        ratelog.redact_details_with(None)
    (line,) = [r.getMessage() for r in caplog.records if r.name == "vllm_sentinel.rejects"]
    assert "token=<REDACTED>" in line and leaked(line) == []


PEM = [
    "-----BEGIN PRIVATE KEY-----",
    "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj",
    "MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu",
    "-----END PRIVATE KEY-----",
]


def test_the_classifier_masks_a_multi_line_key_per_stream_and_a_paste_too() -> None:
    clf = Classifier(RuleBook())
    recs = [LogRecord("a", line) for line in PEM] + [LogRecord("b", PEM[1])]
    for rec in recs:
        clf.feed(rec)
    assert [r.text for r in recs] == [
        PEM[0],
        "<REDACTED>",
        "<REDACTED>",
        "<REDACTED>" + PEM[3],
        PEM[1],  # stream b never opened a key
    ]
    shown = SHIPPED.redact_lines("\n".join(["INFO x", *PEM, "INFO y"]))
    assert PEM[1] not in shown and PEM[2] not in shown
    assert shown.startswith("INFO x\n") and shown.endswith("\nINFO y")
