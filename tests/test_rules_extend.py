"""Rules a team extends without a fork: extra rule directories from the settings (the schema
and tested examples of rules/signatures), rules disabled or overridden by id,
``vllm-sentinel rules list`` and ``vllm-sentinel rules test DIR``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from service.app import rulebook_for
from service.classify.engine import Classifier
from service.classify.ruletest import RuleLoadError, load_rule_set, run_examples
from service.cli import main
from service.config import Settings
from service.offline.report import classify_records
from service.records import LogRecord
from service.sources.files import read_file

ROOT = Path(__file__).resolve().parents[1]
KV = ROOT / "tests" / "fixtures" / "real" / "kv-cache-too-small.log"
READONLY = "OSError: [Errno 30] Read-only file system: '/root/.cache/huggingface/hub/models--x'"

TEAM_RULE = {
    "id": "team-model-cache-readonly",
    "category": "config_error",
    "priority": 70,
    "pattern": r"Read-only file system: .{0,80}(?:huggingface|hf_home|model-cache)",
    "description": "The model cache is mounted read-only.",
    "remediation": "Mount HF_HOME read-write, or pre-fill it and set HF_HUB_OFFLINE=1.",
    "examples": {
        "match": [READONLY],
        "no_match": ["OSError: [Errno 28] No space left on device: '/root/.cache'"],
    },
}
REPLACEMENT = {
    "id": "kv-cache-too-small-for-max-len",
    "category": "oom_kv_cache",
    "stage": "kv_cache_init",
    "priority": 85,
    "pattern": "To serve at least one request with the models?.s max seq len",
    "description": "Team wording.",
    "remediation": "Ask the serving team for a shorter --max-model-len.",
    "examples": {
        "match": [
            "ValueError: To serve at least one request with the model's max "
            "seq len (4000000), (3.81 GiB KV cache is needed"
        ],
        "no_match": ["INFO 01-01 00:00:00 [x.py:1] max seq len 4096"],
    },
}


def rules_dir(tmp_path: Path, *rules: dict, name: str = "team") -> Path:
    d = tmp_path / name
    d.mkdir(exist_ok=True)
    (d / "team.yaml").write_text(yaml.safe_dump({"signatures": list(rules)}, sort_keys=False))
    return d


def run(*argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def verdict(settings: Settings, records: list[LogRecord]) -> list[tuple[str, str | None]]:
    (rep,) = classify_records(records, Classifier(rulebook_for(settings)))
    return [(i["category"], i["rule"]) for i in rep["incidents"]]


def test_rules_test_runs_every_example_and_fails_on_one(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    d = rules_dir(tmp_path, TEAM_RULE, REPLACEMENT)
    code, out, _ = run("rules", "test", str(d), capsys=capsys)
    assert code == 0
    assert out.startswith(f"{len(load_rule_set([d]).signatures)} rules (2 from {d})")
    assert out.rstrip().endswith("all pass")
    bad = {**TEAM_RULE, "examples": {"match": ["no such line"], "no_match": [READONLY]}}
    d2 = rules_dir(tmp_path, bad, name="bad")
    code, out, err = run("rules", "test", str(d2), capsys=capsys)
    assert code == 1
    assert out.splitlines() == [
        f"{d2 / 'team.yaml'}: team-model-cache-readonly: does not match its example: no such line",
        f"{d2 / 'team.yaml'}: team-model-cache-readonly: matches its no_match example: {READONLY}",
    ]
    assert err.startswith("2 of ")


def test_invalid_rules_are_one_line_each(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    d = rules_dir(
        tmp_path,
        {**TEAM_RULE, "category": "disk_full"},
        {**TEAM_RULE, "id": "bad-regex", "pattern": "(unclosed"},
        {k: v for k, v in TEAM_RULE.items() if k != "examples"} | {"id": "no-ex"},
        {**TEAM_RULE, "id": "recursive", "pattern": r"Read-only(?R)?"},
    )
    code, out, err = run("rules", "test", str(d), capsys=capsys)
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert lines[0] == (
        f"vllm-sentinel rules: rules: {d / 'team.yaml'}: "
        "team-model-cache-readonly: category: unknown category 'disk_full'"
    )
    assert lines[1].startswith(
        f"vllm-sentinel rules: rules: {d / 'team.yaml'}: bad-regex: "
        "pattern is not a valid regular expression"
    )
    assert lines[2] == (
        f"vllm-sentinel rules: rules: {d / 'team.yaml'}: no-ex: examples: Field required"
    )
    assert lines[3].startswith(  # valid for regex, but no linear-time engine takes it
        f"vllm-sentinel rules: rules: {d / 'team.yaml'}: recursive: the rule engine cannot "
        "take it: pattern 'Read-only(?R)?': Hyperscan cannot compile it"
    )
    code, _, err = run("rules", "test", str(tmp_path / "nope"), capsys=capsys)
    assert (
        code == 2 and err == f"vllm-sentinel rules: rules: {tmp_path / 'nope'}: not a directory\n"
    )


def test_rules_list_shows_where_each_rule_comes_from(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    d = rules_dir(tmp_path, TEAM_RULE, REPLACEMENT)
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "rules": {
                    "dirs": [str(d)],
                    "disabled": ["cuda-out-of-memory"],
                    "overrides": {"kv-cache-no-memory": {"priority": 99}},
                }
            }
        )
    )
    code, out, err = run("rules", "list", "--config", str(cfg), "--json", capsys=capsys)
    assert code == 0
    rows = {r["id"]: r for r in map(json.loads, out.splitlines())}
    assert rows["team-model-cache-readonly"]["status"] == "added"
    assert rows["team-model-cache-readonly"]["source"] == str(d / "team.yaml")
    assert rows["kv-cache-too-small-for-max-len"]["status"] == "replaced"
    assert rows["kv-cache-no-memory"] | {} == {
        **rows["kv-cache-no-memory"],
        "priority": 99,
        "status": "overridden",
    }
    assert rows["host-oom-killed"]["source"] == "rules/signatures/capacity.yaml"
    assert "cuda-out-of-memory" not in rows
    code, out, err = run("rules", "list", capsys=capsys)
    assert code == 0 and "cuda-out-of-memory" in out and "shipped" in out
    assert err.startswith(f"{len(out.splitlines())} rules")


def test_the_service_uses_the_settings_rules(tmp_path: Path) -> None:
    d = rules_dir(tmp_path, TEAM_RULE, REPLACEMENT)
    line = [LogRecord("pod", READONLY)]
    assert verdict(Settings(), line) != [("config_error", "team-model-cache-readonly")]
    added = Settings(rules={"dirs": [str(d)]})
    assert verdict(added, line) == [("config_error", "team-model-cache-readonly")]
    kv = list(read_file(str(KV)))
    (rep,) = classify_records(kv, Classifier(rulebook_for(added)))
    assert rep["incidents"][0]["remediation"] == REPLACEMENT["remediation"]
    off = Settings(rules={"disabled": ["kv-cache-too-small-for-max-len"]})
    assert ("oom_kv_cache", "kv-cache-too-small-for-max-len") not in verdict(off, kv)
    tweaked = Settings(
        rules={
            "overrides": {
                "kv-cache-too-small-for-max-len": {"remediation": "Page the capacity team."}
            }
        }
    )
    (rep,) = classify_records(kv, Classifier(rulebook_for(tweaked)))
    assert rep["incidents"][0]["remediation"] == "Page the capacity team."


def test_overrides_are_validated_as_the_rule_itself() -> None:
    with pytest.raises(RuleLoadError) as err:
        load_rule_set(
            overrides={
                "kv-cache-no-memory": {"category": "disk_full"},
                "no-such-rule": {"priority": 1},
                "host-oom-killed": {"id": "x"},
            }
        )
    assert err.value.problems == [
        "overrides.kv-cache-no-memory: category: unknown category 'disk_full'",
        "overrides: no rule with id 'no-such-rule'",
        "overrides.host-oom-killed: expected a mapping of fields (the id stays)",
    ]


def test_serve_and_check_config_refuse_rules_that_fail_their_examples(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    bad = {**TEAM_RULE, "examples": {"match": ["no such line"], "no_match": ["x"]}}
    d = rules_dir(tmp_path, bad)
    db = tmp_path / "never.db"
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text(
        yaml.safe_dump({"store": {"url": f"sqlite:///{db}"}, "rules": {"dirs": [str(d)]}})
    )
    expected = (
        f"rules: {d / 'team.yaml'}: team-model-cache-readonly: does not match its "
        "example: no such line"
    )
    code, _, err = run("serve", "--config", str(cfg), capsys=capsys)
    assert (code, err) == (2, f"vllm-sentinel serve: {expected}\n")
    assert not db.exists()
    code, out, _ = run("check-config", str(cfg), capsys=capsys)
    assert (code, out) == (1, f"{cfg}: {expected}\n")


def test_classify_takes_extra_rules(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    d = rules_dir(tmp_path, TEAM_RULE)
    log = tmp_path / "pod.log"
    log.write_text(READONLY + "\n")
    code, out, _ = run(
        "classify", "--no-model", "--json", "--rules-dir", str(d), str(log), capsys=capsys
    )
    assert code == 1
    assert json.loads(out)["incidents"][0]["rule"] == "team-model-cache-readonly"
    assert run_examples(load_rule_set([d]), only_added=True) == []
