"""Shared fixtures: the rule book is compiled once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.classify.rulebook import RuleBook

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "corpus" / "cases"
FIXTURES = ROOT / "tests" / "fixtures"


@pytest.fixture(scope="session")
def rulebook() -> RuleBook:
    return RuleBook()


# `make test-fast` runs `pytest -m "not slow"`: unit tests only, under a minute. Slow are the
# tests that need real services (`integration`: broker, PostgreSQL), these modules (they start
# servers, brokers, browsers or Prometheus, run dispatchers in real time, build the wheel,
# train the model or compare two scans of every corpus log) and these tests.
SLOW_MODULES = frozenset(
    {
        "test_alertmanager",
        "test_blockscan",
        "test_delivery_crash",
        "test_delivery_guarantees",
        "test_e2e_fleet",
        "test_e2e_restarts",
        "test_e2e_service",
        "test_forward",
        "test_forward_limits",
        "test_kafka_source",
        "test_notify_dispatcher",
        "test_notify_fleet",
        "test_otlp",
        "test_prometheus",
        "test_readiness_recovery",
        "test_training",
        "test_ui_browser",
        "test_wheel",
        "test_whole_logs",
    }
)
SLOW_TESTS = frozenset(
    {
        "test_feedback_export::test_feedback_export_feeds_training",  # trains a model
        "test_hostile_lines::test_probes_answer_while_crafted_lines_arrive_and_a_real_oom_still_opens",
    }
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        module = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""
        name = f"{module}::{getattr(item, 'originalname', item.name)}"
        if module in SLOW_MODULES or name in SLOW_TESTS or item.get_closest_marker("integration"):
            item.add_marker(pytest.mark.slow)
