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
