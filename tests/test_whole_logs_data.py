"""The whole-log set is what its index says: byte-exact, labelled in the taxonomy, each line
of its training file where it claims to be (``tests/whole_logs/README.md``)."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import pytest

from service.taxonomy import CATEGORY_TIER, STAGES
from service.training.examples import ORIGIN_THREAD, load_examples
from tests.whole_logs_support import ROOT, WHOLE, raw_bytes, whole_logs

LOGS = whole_logs()
TRAINING = ROOT / "training_data" / "real_logs" / "whole_logs.jsonl"


def test_every_log_is_stored_byte_exact_once_with_its_source_at_a_commit() -> None:
    assert len({r["id"] for r in LOGS}) == len(LOGS)
    assert len({r["sha256"] for r in LOGS}) == len(LOGS)
    stored = {p.relative_to(ROOT).as_posix() for p in WHOLE.glob("*/*.log.gz")}
    assert stored == {r["path"] for r in LOGS}
    for r in LOGS:
        assert hashlib.sha256(raw_bytes(r)).hexdigest() == r["sha256"], r["id"]
        assert r["path"] == f"tests/whole_logs/{r['program']}/{r['id']}.log.gz"
        owner_repo_blob = r["source"].split("/")[3:6]
        assert r["source"].startswith("https://github.com/") and owner_repo_blob[2] == "blob"


def test_labels_are_taxonomy_ids_and_cause_lines_exist() -> None:
    for r in LOGS:
        assert r["outcome"] in ("healthy", "failed") and r["why"]
        if r["outcome"] == "healthy":
            assert "label" not in r and "cause_lines" not in r
            continue
        label, causes = r["label"], r["cause_lines"]
        assert CATEGORY_TIER[label["category"]] == label["tier"] != "none", r["id"]
        assert label["stage"] in STAGES, r["id"]
        lines = raw_bytes(r).decode("utf-8", "replace").split("\n")
        assert causes and all(1 <= n <= len(lines) and lines[n - 1].strip() for n in causes)


def test_the_set_is_mostly_healthy_runs_of_several_programs() -> None:
    outcomes = Counter(r["outcome"] for r in LOGS)
    assert outcomes["healthy"] >= 0.4 * len(LOGS)
    assert outcomes["failed"] > 0
    assert len({r["program"] for r in LOGS}) >= 3


def test_training_lines_are_the_lines_of_the_logs_they_cite() -> None:
    by_id = {r["id"]: r for r in LOGS}
    rows = [json.loads(x) for x in TRAINING.read_text(encoding="utf-8").splitlines()]
    assert Counter(r["role"] for r in rows).keys() == {"cause", "cascade", "noise"}
    for row in rows:
        log = by_id[row["log_id"]]
        lines = raw_bytes(log).decode("utf-8", "replace").split("\n")
        n = row["line_no"]
        assert lines[n - 1].rstrip() == row["line"]
        assert row["context"] == [x.rstrip() for x in lines[max(0, n - 6) : n - 1]]
        assert row["source"] == log["source"] and row["thread"] == f"whole:{log['id']}"
        if row["role"] == "cause":
            assert n in log["cause_lines"] and row["category"] == log["label"]["category"]
        if row["role"] == "noise":
            assert log["outcome"] == "healthy" and row["category"] == "healthy"


@pytest.fixture()
def tiny_data(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    (data / "seeds.jsonl").write_text(
        json.dumps({"text": "CUDA error: no kernel image", "category": "arch_unsupported"}) + "\n"
    )
    (data / "real_logs").mkdir()
    rows = [json.loads(x) for x in TRAINING.read_text(encoding="utf-8").splitlines()]
    pick = [next(r for r in rows if r["role"] == role) for role in ("cause", "noise")]
    (data / "real_logs" / "whole_logs.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in pick)
    )
    return data


def test_the_training_loader_reads_whole_log_lines_grouped_by_log(tiny_data: Path) -> None:
    examples, _ = load_examples(tiny_data)
    real = [e for e in examples if e.origin == ORIGIN_THREAD]
    assert {e.category for e in real} == {
        "healthy",
        next(e.category for e in real if e.category != "healthy"),
    }
    assert all(e.family.startswith("thread:whole:") for e in real)


def test_the_readme_counts_are_the_index_counts() -> None:
    readme = (WHOLE / "README.md").read_text(encoding="utf-8")
    outcomes = Counter(r["outcome"] for r in LOGS)
    assert f"| logs | {len(LOGS)} |" in readme
    assert f"| healthy / failed | {outcomes['healthy']} / {outcomes['failed']} (" in readme
    labels = Counter(
        f"`{r['label']['category']}`/`{r['label']['stage']}`" for r in LOGS if "label" in r
    )
    line = next(x for x in readme.splitlines() if x.startswith("Failed logs by label: "))
    listed = dict(
        item.rsplit(" ", 1)
        for item in line.removeprefix("Failed logs by label: ").rstrip(".").split(", ")
    )
    assert {k: int(v) for k, v in listed.items()} == dict(labels)
