"""Judgements are rules data (rules/judgements.yaml, rules/benign.yaml ``exceptions``): the
shipped file holds the documented defaults, a team's rules directory overrides its keys
(validated like the shipped file), and the two settings that predate the file win when set."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from service.app import rulebook_for
from service.classify.engine import Classifier
from service.classify.judgements.registry import load_judgements
from service.classify.rulebook import RuleBook
from service.classify.rules import RULES_DIR, merge_judgements
from service.classify.ruletest import RuleLoadError, load_rule_set
from service.config import Settings
from service.ingest.timestamps import line_time
from service.offline.report import classify_records
from service.records import LogRecord
from tests.test_engine import HEALTHY_V1

REAL = Path(__file__).resolve().parent / "fixtures" / "real"
STALL = (REAL / "stall-multinode-no-peer.log").read_text().splitlines()
STALL_END = max(t for t in (line_time(x, 2026) for x in STALL) if t is not None)
RB = RuleBook()


def team(tmp_path: Path, judgements: dict, name: str = "team") -> Path:
    d = tmp_path / name
    d.mkdir(exist_ok=True)
    (d / "judgements.yaml").write_text(yaml.safe_dump(judgements, sort_keys=False))
    return d


def stalled(clf: Classifier, now: float) -> list[str]:
    (rep,) = classify_records([LogRecord("s", t) for t in STALL], clf, now=now)
    return [i["rule"] for i in rep["incidents"]]


def test_the_shipped_file_holds_the_documented_defaults() -> None:
    j = RB.judgements
    deadlines = {
        "container": 600,
        "cuda_init": 600,
        "distributed_init": 900,
        "model_load": 3600,
        "kv_cache_init": 2400,
        "api_server": 600,
    }
    assert j.stalls.deadlines_s == deadlines == Settings().stall.deadlines_s
    assert j.restarts.crash_loop_attempts == 3 == Settings().restarts.crash_loop_attempts
    assert (j.waiting.repeats, j.waiting.min_span_s) == (5, 120)
    assert (j.restarts.gap_s, j.restarts.pending_wait_s) == (5, 60)
    assert [m.id for m in j.prefix_caching.off_by_default] == ["kimi-k3"]
    assert frozenset(j.fleet.prone_categories) >= {"nccl_error", "gpu_not_visible"}
    assert {"KeyboardInterrupt", "asyncio.CancelledError"} <= RB.benign_exceptions
    assert Classifier(RB).stall_deadlines == deadlines


def test_every_value_of_the_file_is_documented_by_a_comment() -> None:
    """Each key of a section (``stalls.deadlines_s``, ``serving.kv_high_pct`` ...) has its
    own comment right above it."""
    lines = (RULES_DIR / "judgements.yaml").read_text().splitlines()
    keys = [n for n, t in enumerate(lines) if t.startswith("  ") and t[2:3].isalpha()]
    assert len(keys) >= 13
    for n in keys:
        assert lines[n - 1].lstrip().startswith("#"), f"no comment above {lines[n].strip()!r}"


def test_a_team_file_overrides_keys_and_keeps_the_rest(tmp_path: Path) -> None:
    d = team(
        tmp_path, {"stalls": {"deadlines_s": {"distributed_init": 60}}, "waiting": {"repeats": 3}}
    )
    j = load_rule_set([d]).judgements
    assert j is not None
    assert j.stalls.deadlines_s["distributed_init"] == 60
    assert j.stalls.deadlines_s["model_load"] == 3600  # a mapping is merged key by key
    assert (j.waiting.repeats, j.waiting.min_span_s) == (3, 120)
    assert load_rule_set([]).judgements is None  # no team file: the shipped ones
    # a list replaces the shipped list
    assert merge_judgements({"a": {"b": [1, 2], "c": 1}}, {"a": {"b": [3]}}) == {
        "a": {"b": [3], "c": 1}
    }


def test_the_service_stalls_at_a_team_deadline(tmp_path: Path) -> None:
    now = STALL_END + 120  # two minutes without progress in distributed_init
    assert stalled(Classifier(rulebook_for(Settings())), now) == []
    d = team(tmp_path, {"stalls": {"deadlines_s": {"distributed_init": 60}}})
    settings = Settings(rules={"dirs": [str(d)]})
    assert stalled(Classifier(rulebook_for(settings)), now) == ["stall-distributed_init"]
    # the setting, when given, wins over every rules file
    chosen = Settings(rules={"dirs": [str(d)]}, stall={"deadlines_s": {"distributed_init": 900}})
    assert chosen.stall.deadlines_if_set() == {"distributed_init": 900}
    assert Settings().stall.deadlines_if_set() is None
    clf = Classifier(rulebook_for(chosen), stall_deadlines=chosen.stall.deadlines_if_set())
    assert stalled(clf, now) == []


def test_a_team_stall_category_and_crash_loop_count(tmp_path: Path) -> None:
    d = team(
        tmp_path,
        {
            "stalls": {"categories": {"distributed_init": "nccl_error"}},
            "restarts": {"crash_loop_attempts": 5},
        },
    )
    rb = load_rule_set([d]).rulebook()
    (rep,) = classify_records(
        [LogRecord("s", t) for t in STALL], Classifier(rb), now=STALL_END + 3600
    )
    assert rep["incidents"][0]["category"] == "nccl_error"
    assert Classifier(rb).judgements.restarts.crash_loop_attempts == 5
    assert Classifier(rb, crash_loop_attempts=2).judgements.restarts.crash_loop_attempts == 2


def test_a_team_model_that_needs_prefix_caching_is_warned_about(tmp_path: Path) -> None:
    d = team(tmp_path, {"prefix_caching": {"off_by_default": [{"id": "qwen3-8b", "name": "Q"}]}})
    log = HEALTHY_V1.replace(", 'enable_prefix_caching': True", "").replace(
        "enable_prefix_caching=True", "enable_prefix_caching=False"
    )
    records = [LogRecord("s", t) for t in log.splitlines()]
    (rep,) = classify_records(records, Classifier(load_rule_set([d]).rulebook()))
    (w,) = rep["warnings"]
    assert w["rule"] == "prefix-caching-off-qwen3-8b" and w["detail"].startswith("Q runs without")
    (rep,) = classify_records(records, Classifier(RB))
    assert rep["warnings"] == []


@pytest.mark.parametrize(
    ("judgements", "problem"),
    [
        ({"stalls": {"deadlines_s": {"warp_drive": 5}}}, "unknown stage 'warp_drive'"),
        ({"fleet": {"prone_categories": ["meteor"]}}, "unknown categories ['meteor']"),
        ({"restarts": {"crash_loop_attempts": 1}}, "restarts.crash_loop_attempts"),
        ({"serving": {"kv_high": 90}}, "serving.kv_high: Extra inputs are not permitted"),
    ],
)
def test_an_invalid_team_file_is_refused_with_its_name(
    tmp_path: Path, judgements: dict, problem: str
) -> None:
    d = team(tmp_path, judgements)
    with pytest.raises(RuleLoadError) as err:
        load_rule_set([d])
    (line,) = err.value.problems
    assert line.startswith(str(d / "judgements.yaml")) and problem in line


def test_a_directory_may_hold_only_judgements_and_they_are_no_signatures(tmp_path: Path) -> None:
    d = team(tmp_path, {"waiting": {"repeats": 4}})
    rs = load_rule_set([d])
    assert len(rs.signatures) == len(RB.signatures) and rs.judgement_files == [
        str(d / "judgements.yaml")
    ]
    assert load_judgements(RULES_DIR, [d / "judgements.yaml"]).waiting.repeats == 4


def test_a_team_fleet_prone_list_reaches_the_fleet_hold_and_the_store(tmp_path: Path) -> None:
    """Fleet grouping reads the rule book's list (a team's override included), not only the
    shipped one: the dispatcher holds such an incident's page for its fleet."""
    from service.config import FleetSettings
    from service.incidents.fleet import find_fleet
    from service.notify.dispatcher import Dispatcher
    from service.store import Store

    assert "oom_kv_cache" not in load_judgements().fleet.prone_categories
    d = team(tmp_path, {"fleet": {"prone_categories": ["oom_kv_cache"]}})
    rb = rulebook_for(Settings(rules={"dirs": [str(d)]}))
    prone = frozenset(rb.judgements.fleet.prone_categories)
    assert prone == {"oom_kv_cache"}
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    store.migrate()
    try:
        shipped_prone = frozenset(load_judgements().fleet.prone_categories)
        shipped = Dispatcher(
            store, [], instance_id="a", fleet=FleetSettings(), fleet_prone=shipped_prone
        )
        teams = Dispatcher(store, [], instance_id="b", fleet=FleetSettings(), fleet_prone=prone)
        kv = {"severity": "critical", "primary": {"category": "oom_kv_cache"}, "meta": {}}
        assert shipped.fleet is not None and not shipped.fleet.prone(kv)
        assert teams.fleet is not None and teams.fleet.prone(kv)
    finally:
        store.close()
    members = [
        {
            "id": f"i{n}",
            "primary": {"category": "oom_kv_cache"},
            "severity": "critical",
            "facts": {"image": "vllm/vllm-openai:v0.11.0"},
            "meta": {"namespace": "ml", "pod": f"p{n}", "container": "vllm", "node": f"n{n}"},
        }
        for n in range(3)
    ]
    assert (
        find_fleet(members[0], members[1:], 3, frozenset(load_judgements().fleet.prone_categories))
        is None
    )
    found = find_fleet(members[0], members[1:], 3, prone)
    assert found is not None and found[:2] == ("image", "vllm/vllm-openai:v0.11.0")


def test_the_cli_classifies_with_a_team_judgements_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from service.cli import main

    d = team(tmp_path, {"stalls": {"deadlines_s": {"distributed_init": 60}}})
    log = tmp_path / "stall.log"
    log.write_text("\n".join(STALL) + "\n")
    now = str(STALL_END + 120)
    assert main(["classify", "--json", "--now", now, str(log)]) == 0
    capsys.readouterr()
    assert main(["classify", "--json", "--now", now, "--rules-dir", str(d), str(log)]) == 1
    (rep,) = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.strip()]
    assert [i["rule"] for i in rep["incidents"]] == ["stall-distributed_init"]
