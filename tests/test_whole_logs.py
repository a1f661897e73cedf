"""Whole public logs through the offline classifier, as ``vllm-sentinel classify`` runs it.

Every healthy log must page nobody and every failed log must page; the logs the classifier
still gets wrong are listed below (with why) and the test fails as soon as one of them is
fixed, so the lists only shrink. Category / stage agreement is reported, not asserted per
log (``tests/whole_logs/README.md``)."""

from __future__ import annotations

from functools import cache

import pytest

from service.classify.engine import Classifier
from service.classify.loader import load_text_model
from service.classify.novelty import NoveltyDetector
from service.classify.rulebook import RuleBook
from service.classify.text_model import TextModel
from service.offline.report import StreamReport, classify_paths
from tests.whole_logs_support import ROOT, WholeLog, whole_logs

LOGS = whole_logs()

# healthy logs that page today: id -> why (a class of false alarm the classifier must learn)
KNOWN_FALSE_ALARMS: dict[str, str] = {}

# failed logs that page nobody today: id -> why
KNOWN_MISSED: dict[str, str] = {}


@cache
def _rules() -> RuleBook:
    return RuleBook()


@cache
def _model() -> TextModel | None:
    return load_text_model()


def classify(row: WholeLog) -> list[StreamReport]:
    """One fresh classifier per log with the CLI's defaults (``build_classifier``: the
    shipped rules and text model), the rules and model loaded once."""
    clf = Classifier(_rules(), text_model=_model(), novelty=NoveltyDetector())
    return classify_paths([str(ROOT / row["path"])], clf)


def pages(reports: list[StreamReport]) -> bool:
    return any(r["incidents"] for r in reports)


def test_the_known_lists_name_logs_of_the_set() -> None:
    by_id = {r["id"]: r["outcome"] for r in LOGS}
    assert all(by_id.get(i) == "healthy" for i in KNOWN_FALSE_ALARMS)
    assert all(by_id.get(i) == "failed" for i in KNOWN_MISSED)


@pytest.mark.parametrize(
    "row", [r for r in LOGS if r["outcome"] == "healthy"], ids=lambda r: r["id"]
)
def test_a_healthy_log_pages_nobody(row: WholeLog) -> None:
    paged = pages(classify(row))
    if row["id"] in KNOWN_FALSE_ALARMS:
        assert paged, f"{row['id']} no longer pages: remove it from KNOWN_FALSE_ALARMS"
    else:
        assert not paged


@pytest.mark.parametrize(
    "row", [r for r in LOGS if r["outcome"] == "failed"], ids=lambda r: r["id"]
)
def test_a_failed_log_pages(row: WholeLog) -> None:
    paged = pages(classify(row))
    if row["id"] in KNOWN_MISSED:
        assert not paged, f"{row['id']} pages now: remove it from KNOWN_MISSED"
    else:
        assert paged


def test_category_and_stage_agreement_on_failed_logs_is_reported(
    capsys: pytest.CaptureFixture[str],
) -> None:
    failed = [r for r in LOGS if r["outcome"] == "failed"]
    cat = stage = 0
    for row in failed:
        incidents = [i for rep in classify(row) for i in rep["incidents"]]
        if incidents:
            cat += incidents[0]["category"] == row["label"]["category"]
            stage += incidents[0]["stage"] == row["label"]["stage"]
    with capsys.disabled():
        print(
            f"\n[whole logs] {len(failed)} failed logs: root-cause category agrees on {cat}, "
            f"stage on {stage}"
        )
    assert cat <= len(failed) and stage <= len(failed)
