"""Judgements are registered by kind (service/classify/judgements/registry.py): each is one
module and one block of rules/judgements.yaml, which says whether it runs and with which
numbers. The repeated-failure judgement was added that way (no engine edit): a stream that
gets ready, serves, and dies the same way again and again within the window is warned about.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from service.classify.engine import Classifier
from service.classify.judgements import crash_loops, fleet, repeated_failure, stalls
from service.classify.judgements.judge import Judge
from service.classify.judgements.playbook import playbook_for
from service.classify.judgements.registry import (
    KINDS,
    JudgementRules,
    Judges,
    _overrides,
    load_judgements,
)
from service.classify.rulebook import RuleBook
from service.classify.rules import RULES_DIR, load_playbook, merge_judgements
from service.classify.ruletest import load_rule_set
from service.incidents.finding import Finding
from service.incidents.incident import Change, Incident
from service.offline.report import classify_records
from service.records import LogRecord

REAL = Path(__file__).resolve().parent / "fixtures" / "real"
# a real capture: vLLM starts, gets ready, serves, and its engine core is killed (host memory)
KILLED = (REAL / "enginecore-killed-while-serving.log").read_text().splitlines()
RB = RuleBook()


def team(tmp_path: Path, judgements: dict[str, Any]) -> RuleBook:
    d = tmp_path / "team"
    d.mkdir(exist_ok=True)
    (d / "judgements.yaml").write_text(yaml.safe_dump(judgements, sort_keys=False))
    return load_rule_set([d]).rulebook()


def flapping(clf: Classifier, gaps_s: list[float], stream: str = "ml/llm-0/vllm") -> list[Change]:
    """The capture once per run, each run ``gaps_s[i]`` seconds after the one before (the
    lines of a run one second apart), through the service's per-record door."""
    changes: list[Change] = []
    start = 1_780_000_000.0
    for gap in [0.0, *gaps_s]:
        start += gap
        for n, text in enumerate(KILLED):
            changes += clf.feed(LogRecord(stream, text, time=start + n))
    return changes


def warned(changes: list[Change]) -> list[str]:
    return [
        c.incident.primary.detail or ""
        for c in changes
        if c.kind == "opened" and c.incident.primary.rule == repeated_failure.RULE
    ]


def opened_failures(changes: list[Change]) -> list[str]:
    return [
        c.incident.category
        for c in changes
        if c.kind == "opened" and c.incident.severity == "critical"
    ]


def test_the_shipped_file_has_one_block_per_registered_kind() -> None:
    shipped = yaml.safe_load((RULES_DIR / "judgements.yaml").read_text())
    assert set(shipped) - {"version"} == {k.name for k in KINDS}
    rules = load_judgements()
    assert rules.get(repeated_failure.KIND).count == 3
    assert rules.get(repeated_failure.KIND).within_s == 600
    assert rules.get(crash_loops.KIND).crash_loop_attempts == rules.restarts.crash_loop_attempts


def test_three_alike_failures_within_ten_minutes_are_a_repeated_failure() -> None:
    clf = Classifier(RB)
    changes = flapping(clf, [240.0, 240.0])  # three runs, four minutes apart
    assert opened_failures(changes) == ["host_memory"] * 3  # each restart got ready first
    (detail,) = warned(changes)
    assert detail.startswith("failed the same way (host_memory) 3 times in 8.")
    st = clf.state("ml/llm-0/vllm")
    (warning,) = [i for i in st.incidents if i.severity == "warning"]
    assert warning.run == st.run and warning.category == "host_memory"
    assert [f.category for f in st.failures] == ["host_memory"] * 3


def test_the_same_failures_further_apart_or_fewer_are_not() -> None:
    assert warned(flapping(Classifier(RB), [400.0, 400.0])) == []  # 13 min first to last
    assert warned(flapping(Classifier(RB), [60.0])) == []  # only two
    # a fourth within the window is not warned about again (the count is reached once)
    assert len(warned(flapping(Classifier(RB), [120.0, 120.0, 120.0]))) == 1


def test_failures_without_times_are_not_counted() -> None:
    clf = Classifier(RB)
    (report,) = classify_records([LogRecord("s", t) for t in KILLED * 3], clf)
    assert [i["category"] for i in report["incidents"]] == ["host_memory"] * 3
    assert [f.at for f in clf.state("s").failures] == [None] * 3  # announced, times unknown
    assert report["warnings"] == []


def test_a_team_tunes_or_turns_off_the_judgement(tmp_path: Path) -> None:
    two = Classifier(team(tmp_path, {"repeated_failure": {"count": 2}}))
    (detail,) = warned(flapping(two, [60.0]))
    assert "2 times" in detail
    off = Classifier(team(tmp_path, {"repeated_failure": {"enabled": False}}))
    assert warned(flapping(off, [60.0, 60.0])) == []
    assert not any(isinstance(j, repeated_failure.RepeatedFailure) for j in off.judges.judges)


def test_a_disabled_kind_does_not_run_and_its_numbers_stay_readable(tmp_path: Path) -> None:
    rb = team(tmp_path, {"stalls": {"enabled": False}})
    clf = Classifier(rb)
    assert not any(isinstance(j, stalls.Stalls) for j in clf.judges.judges)
    assert clf.stall_deadlines["model_load"] == 3600
    assert fleet.prone(
        team(tmp_path, {"fleet": {"enabled": False}}).judgements.get(fleet.KIND)
    ) == (frozenset())


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"flux_capacitor": {"count": 1}}, "flux_capacitor"),
        ({"repeated_failure": {"count": 1}}, "repeated_failure.count"),
        ({"repeated_failure": {"within": 60}}, "repeated_failure.within"),
    ],
)
def test_an_unknown_block_or_a_bad_number_is_refused(data: dict[str, Any], problem: str) -> None:
    base = yaml.safe_load((RULES_DIR / "judgements.yaml").read_text())

    with pytest.raises(ValidationError) as err:
        JudgementRules.validate(merge_judgements(base, data))
    assert problem in str(err.value).replace("\n", ".").replace(" ", "")


def test_the_crash_loop_judgement_decides_both_crash_loop_paths(tmp_path: Path) -> None:
    playbook = load_playbook()
    judges = Judges(load_judgements(), playbook)
    off = Judges(team(tmp_path, {"restarts": {"enabled": False}}).judgements, playbook)

    inc = Incident(
        "i", "s", 1, Finding("capacity", "oom_kv_cache", "kv_cache_init", 1, "s", None, "x")
    )
    inc.restarts = 2
    loop = judges.restarted(inc)
    assert loop is not None and loop.attempts == 3 and "failed the same way 3 times" in loop.note
    inc.restarts = 1
    assert judges.restarted(inc) is None
    backoff = judges.evidence(inc, [crash_loops.CRASH_LOOP_RULE])
    assert backoff is not None and backoff.source == "kubernetes"
    assert judges.evidence(inc, [crash_loops.CRASH_LOOP_RULE, "other"]) is None
    inc.restarts = 5
    assert off.restarted(inc) is None and off.evidence(inc, [crash_loops.CRASH_LOOP_RULE]) is None


def test_the_cu129_bridge_is_playbook_data() -> None:
    playbook = load_playbook()

    def bridge(image: str, book: dict[str, Any]) -> bool:
        pb = playbook_for("driver_incompatible", book, {"image": image})
        (option,) = [d for d in pb["decision"] if d["option"] == "cu129_bridge"]
        return bool(option["available"])

    assert not bridge("vllm/vllm-openai:kimi-k3", playbook)
    assert not bridge("vllm/vllm-openai:v0.11.0-cu130", playbook)
    assert bridge("vllm/vllm-openai:v0.11.0-cu129", playbook)
    other = yaml.safe_load(yaml.safe_dump(playbook))
    decision = other["categories"]["driver_incompatible"]["decision"]
    decision["cu129_bridge_unavailable"] = {"image_contains": ["qwen9"]}
    assert bridge("vllm/vllm-openai:kimi-k3", other) and not bridge("x/qwen9:1", other)


def test_only_judges_with_something_to_say_per_line_are_asked_and_nothing_changes() -> None:
    playbook = load_playbook(RULES_DIR)
    judges = Judges(load_judgements(RULES_DIR), playbook)
    assert {type(j).__name__ for j in judges._line} == {"Startup", "Serving", "Waits"}
    assert [type(j).__name__ for j in judges._after] == ["RepeatedFailure"]
    assert judges._line == [j for j in judges.judges if j in judges._line]  # same order

    def report(ask_all: bool) -> list[dict[str, Any]]:
        clf = Classifier(RB)
        if ask_all:  # the whole list, as before the judges were sorted out
            clf.judges._line = clf.judges._after = list(clf.judges.judges)
        recs = [LogRecord(stream="k", text=t) for t in KILLED]
        return classify_records(recs, clf)

    assert report(ask_all=False) == report(ask_all=True)


def test_a_judge_answering_per_line_on_its_own_is_asked() -> None:
    class Quiet(Judge):
        pass

    class Speaks(Judge):
        def line(self, st: Any, seen: Any) -> list[Any]:
            return []

    patched = Quiet()
    patched.line = lambda st, seen: []  # type: ignore[method-assign]
    assert [_overrides(j, "line") for j in (Quiet(), Speaks(), patched)] == [False, True, True]
