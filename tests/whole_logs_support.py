"""The whole public logs of ``tests/whole_logs/`` (its README): index rows and their text."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import NotRequired

from typing_extensions import TypedDict

ROOT = Path(__file__).resolve().parents[1]
WHOLE = ROOT / "tests" / "whole_logs"
INDEX = WHOLE / "index.jsonl"


class Label(TypedDict):
    tier: str
    category: str
    stage: str


class WholeLog(TypedDict):
    """One line of ``index.jsonl``: a whole log, where it came from and what it shows."""

    id: str
    path: str
    source: str
    sha256: str
    program: str
    vendor: str
    vllm_version: str | None
    outcome: str  # "healthy" | "failed"
    why: str
    label: NotRequired[Label]
    cause_lines: NotRequired[list[int]]


def whole_logs() -> list[WholeLog]:
    rows: list[WholeLog] = []
    with INDEX.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                rows.append(json.loads(line))
    return rows


def raw_bytes(row: WholeLog) -> bytes:
    """The log exactly as committed upstream (stored gzip-compressed)."""
    return gzip.decompress((ROOT / row["path"]).read_bytes())
