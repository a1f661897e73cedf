"""Feedback → training corrections: ``vllm-sentinel feedback-export``.

Every incident with feedback (``POST /incidents/{id}/feedback``) becomes one line of the JSONL
that ``vllm-sentinel train --with-feedback FILE`` reads: ``{"text": <the incident's root-cause
line, cleaned to its message>, "category": <the corrected category, or the incident's own
when the feedback said it was right>}`` (plus ``incident_id`` and ``correct`` for review;
training ignores them). The newest feedback on an incident wins; a "wrong" without a
corrected category teaches nothing and is skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import IO, TypedDict

from service.parse.line import parse_line
from service.store.views import FeedbackReview
from service.taxonomy import CATEGORY_TIER


class Correction(TypedDict):
    """One line of the exported JSONL."""

    text: str
    category: str
    incident_id: str
    correct: bool


def training_text(line: str | None) -> str:
    """The message of a root-cause line, as training examples hold it: without the vLLM
    header, process prefixes, runtime wrappers and colours (``RuntimeError: ...``)."""
    if not line:
        return ""
    parsed = parse_line(line)
    return (parsed.message or parsed.text).strip()


def corrections(feedback: Iterable[FeedbackReview]) -> tuple[list[Correction], dict[str, int]]:
    """Rows of :meth:`Store.list_feedback` (newest first) → (corrections, skipped counts)."""
    out: list[Correction] = []
    skipped = {"older_feedback": 0, "no_category": 0, "no_line": 0, "unknown_category": 0}
    seen: set[str] = set()
    for row in feedback:
        if row["incident_id"] in seen:
            skipped["older_feedback"] += 1
            continue
        seen.add(row["incident_id"])
        category = row["incident_category"] if row["correct"] else row.get("category")
        if not category:
            skipped["no_category"] += 1
            continue
        if category not in CATEGORY_TIER:
            skipped["unknown_category"] += 1
            continue
        text = training_text(row.get("line"))
        if not text:
            skipped["no_line"] += 1
            continue
        out.append(
            {
                "text": text,
                "category": category,
                "incident_id": row["incident_id"],
                "correct": bool(row["correct"]),
            }
        )
    out.reverse()  # oldest first: a stable file as feedback accumulates
    return out, skipped


def write_jsonl(rows: list[Correction], fh: IO[str]) -> None:
    for r in rows:
        fh.write(json.dumps(r, ensure_ascii=False) + "\n")
