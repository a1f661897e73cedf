"""The blind sets (tests/blind, tests/blind2, tests/blind3) and the corpus never feed training:
the loader refuses their folders and no training example (or seed) cites a blind case's
source. No source appears in two of these sets. The second and third blind sets' dev /
held-out splits are a fixed function of the case id."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from service.taxonomy import CATEGORY_TIER, STAGES
from service.training.examples import load_examples
from tests.blind2.split import case_ids, half
from tests.blind3 import split as blind3_split

ROOT = Path(__file__).resolve().parents[1]
BLIND_SETS = ["tests/blind/cases", "tests/blind2/cases", "tests/blind3/cases"]


def sources(folder: Path) -> set[str]:
    out = set()
    for p in folder.glob("*.json"):
        src = json.loads(p.read_text()).get("source") or ""
        if src.startswith("http"):
            out.add(src.rstrip("/"))
    return out


def cited_by_training() -> set[str]:
    """Every source URL a training example or seed names (``a; b`` lists, ``url note``)."""
    cited = set()
    data = ROOT / "training_data"
    for path in data.rglob("*.jsonl"):
        for line in path.read_text().splitlines():
            if line.strip():
                for part in str(json.loads(line).get("source", "")).split(";"):
                    cited.add(part.strip().split(" ")[0].rstrip("/"))
    for path in data.rglob("*.yaml"):
        cited |= {u.rstrip("/.,)") for u in re.findall(r"https?://[^\s'\"]+", path.read_text())}
    return cited


@pytest.mark.parametrize(
    "folder",
    [
        "tests/blind/cases",
        "tests/corpus/cases",
        "tests/blind",
        "tests/blind2",
        "tests/blind2/cases",
        "tests/blind3",
        "tests/blind3/cases",
    ],
)
def test_the_training_loader_refuses_held_out_folders(folder: str) -> None:
    with pytest.raises(ValueError, match="held-out"):
        load_examples(ROOT / folder)


@pytest.mark.parametrize("folder", BLIND_SETS)
def test_no_training_example_cites_a_blind_case(folder: str) -> None:
    blind = sources(ROOT / folder)
    assert len(blind) >= 100
    leaked = blind & cited_by_training()
    assert not leaked, sorted(leaked)[:5]


def test_the_two_blind_sets_share_no_source() -> None:
    shared = sources(ROOT / "tests/blind/cases") & sources(ROOT / "tests/blind2/cases")
    assert not shared, sorted(shared)[:5]


def test_no_blind3_source_appears_in_the_corpus_the_older_blind_sets_or_training_data() -> None:
    blind3 = sources(ROOT / "tests/blind3/cases")
    assert len(blind3) == len(list((ROOT / "tests/blind3/cases").glob("*.json")))
    elsewhere = cited_by_training()
    for folder in ("tests/corpus/cases", "tests/blind/cases", "tests/blind2/cases"):
        elsewhere |= sources(ROOT / folder)
    leaked = blind3 & elsewhere
    assert not leaked, sorted(leaked)[:5]
    # a committed file is one source per repository path, whatever the commit it was read at
    paths = {re.sub(r"/blob/[0-9a-f]{40}/", "/blob/*/", u) for u in blind3}
    older = {re.sub(r"/blob/[0-9a-f]{40}/", "/blob/*/", u) for u in elsewhere}
    assert not paths & older, sorted(paths & older)[:5]


def test_blind3_cases_are_labelled_in_the_taxonomy_with_whole_logs_and_healthy_runs() -> None:
    cases = [json.loads(p.read_text()) for p in (ROOT / "tests/blind3/cases").glob("*.json")]
    assert len(cases) >= 100
    for case in cases:
        assert CATEGORY_TIER[case["category"]] == case["tier"], case["source"]
        assert case["stage"] in STAGES, case["source"]
        assert isinstance(case["whole_log"], bool), case["source"]
    assert sum(c["whole_log"] for c in cases) >= 0.6 * len(cases)
    assert sum(c["category"] == "healthy" for c in cases) >= 0.3 * len(cases)


def test_blind2_split_is_a_fixed_partition_listed_in_the_readme() -> None:
    ids = case_ids()
    dev, held = case_ids("dev"), case_ids("heldout")
    assert sorted(dev + held) == ids and not set(dev) & set(held)
    assert len(dev) >= 40 and len(held) >= 40
    # the rule (sha256 parity of the id), pinned by two ids so it cannot drift silently
    assert half("blind2-akash-209-nvidia-smi-unknown-error-dmesg-xid79") == "dev"
    assert half("blind2-club3090-158-p2p-dflash-nixl-available-bench") == "heldout"
    readme = (ROOT / "tests/blind2/README.md").read_text()
    listed = dict(re.findall(r"^\| `(blind2-[^`]+)` \| (dev|heldout) \|", readme, re.M))
    assert listed == {i: half(i) for i in ids}


def test_blind3_split_reuses_the_blind2_rule_and_matches_its_readme() -> None:
    ids = blind3_split.case_ids()
    dev, held = blind3_split.case_ids("dev"), blind3_split.case_ids("heldout")
    assert sorted(dev + held) == ids and not set(dev) & set(held)
    assert len(dev) >= 40 and len(held) >= 40
    assert blind3_split.half is half  # one rule for both sets, not a copy
    readme = (ROOT / "tests/blind3/README.md").read_text()
    listed = dict(re.findall(r"^\| `(blind3-[^`]+)` \| (dev|heldout) \|", readme, re.M))
    assert listed == {i: half(i) for i in ids}
