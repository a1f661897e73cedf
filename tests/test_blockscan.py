"""Scanning files by blocks gives exactly the reports of the per-line path: every corpus
log, blind log and real capture, raw and CRI, junk bytes and CRI partial lines included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.classify.engine import Classifier
from service.classify.loader import build_classifier
from service.classify.rulebook import RuleBook
from service.ingest.envelope import Format
from service.offline import blockscan
from service.offline.report import classify_paths, classify_records
from service.sources.files import read_files

ROOT = Path(__file__).resolve().parents[1]
LOGS = sorted(
    [
        *ROOT.glob("tests/corpus/cases/*.log"),
        *ROOT.glob("tests/fixtures/real/*.log"),
        *ROOT.glob("tests/blind/cases/*.log"),
    ]
)
RB = RuleBook()


def same(path: Path, make) -> None:
    a = classify_records(read_files([str(path)]), make())
    b = classify_paths([str(path)], make())
    assert json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def test_most_logs_take_the_block_path() -> None:
    eligible = [p for p in LOGS if blockscan.eligible(str(p), "auto")]
    assert len(eligible) >= 0.9 * len(LOGS)
    assert (
        blockscan.eligible(str(ROOT / "tests/fixtures/real/kv-cache-too-small.cri.log"), "auto")
        is Format.CRI
    )


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.name)
def test_block_scanning_changes_nothing(path: Path) -> None:
    same(path, lambda: Classifier(RB))


@pytest.mark.parametrize("path", LOGS[::10], ids=lambda p: p.name)
def test_block_scanning_changes_nothing_with_the_model(path: Path) -> None:
    same(path, build_classifier)


def test_junk_bytes_and_cri_partials_take_the_per_line_decoder(tmp_path) -> None:
    real = (ROOT / "tests/fixtures/real/kv-cache-too-small.log").read_bytes()
    junk = tmp_path / "junk.log"
    junk.write_bytes(real[:2000] + b"\xff\xfe bad \x00 bytes\n" + real[2000:])
    same(junk, lambda: Classifier(RB))
    cri = (ROOT / "tests/fixtures/real/kv-cache-too-small.cri.log").read_text().splitlines()
    first = cri[5]
    ts, fd, _flag, text = first.split(" ", 3)
    cri[5:6] = [f"{ts} {fd} P {text[:20]}", f"{ts} {fd} F {text[20:]}"]
    part = tmp_path / "partial.cri.log"
    part.write_text("\n".join(cri) + "\n")
    same(part, lambda: Classifier(RB))


def test_json_lines_after_a_text_head_are_still_json_records(tmp_path) -> None:
    text = (ROOT / "tests/fixtures/real/healthy-serving-prefix-caching-sigterm.log").read_text()
    head = (text * (1 + (70 << 10) // len(text)))[: 70 << 10]
    head = head[: head.rfind("\n") + 1]
    json_log = sorted((ROOT / "tests/fixtures/real-json").glob("*kv-cache*"))[0].read_text()
    mixed = tmp_path / "mixed.log"
    mixed.write_text(head + json_log)
    assert blockscan.eligible(str(mixed), "auto") is Format.RAW
    same(mixed, lambda: Classifier(RB))
