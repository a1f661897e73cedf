"""Stall detection: a startup that makes no progress past a stage within its deadline.

Checked on a timer (``Classifier.tick(now)``), not only when a line arrives: the worst
hangs print nothing. The deadlines and the category of a stall per stage are rules data
(``rules/judgements.yaml`` ``stalls``; the defaults fit large models).
"""

from __future__ import annotations

from collections.abc import Mapping

STALL_PREFIX = "stall-"


def overdue(
    stage: str | None, since: float | None, now: float, deadlines: Mapping[str, float]
) -> float | None:
    """Seconds the stream has been stuck in ``stage`` when past its deadline, else None."""
    if stage is None or since is None or stage not in deadlines:
        return None
    waited = now - since
    return waited if waited > deadlines[stage] else None


def is_stall(rule: str | None) -> bool:
    return bool(rule and rule.startswith(STALL_PREFIX))
