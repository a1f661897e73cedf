"""A repeated failure (block ``repeated_failure``): the same stream failed the same way
``count`` times within ``within_s`` seconds, each time as a new incident.

A crash loop (:mod:`.crash_loops`) counts failed *starts*: restarts that never got past the
failing stage are folded into one incident. This counts what it cannot see: a workload whose
restarts get ready, serve, and die the same way again (an out-of-memory under load every few
minutes, a node that keeps losing its GPU). Each of those failures is its own incident and
pages on its own; the pattern across them is a warning (it never pages) on the run of the
latest, saying how often and since when, so whoever takes the page sees that restarting
is not fixing it.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from service.classify.judgements.judge import Blocks, Config, Judge, Kind
from service.classify.judgements.judgement import Judgement
from service.classify.rules import PlaybookRules
from service.classify.stream_state import StreamState
from service.incidents.incident import Change

RULE = "repeated-failure"


class RepeatedFailureRules(Config):
    count: int = Field(ge=2)  # failures the same way, this one included ...
    within_s: float = Field(gt=0)  # ... within this many seconds of each other's first


class RepeatedFailure(Judge):
    def __init__(self, rules: RepeatedFailureRules) -> None:
        self.count = rules.count
        self.within_s = rules.within_s

    def after(self, st: StreamState, changes: Sequence[Change]) -> Sequence[Judgement]:
        """A failure just announced on ``st`` that makes ``count`` the same way within
        the window (failures without a time are not counted)."""
        out: list[Judgement] = []
        for ch in changes:
            inc = ch.incident
            if ch.kind != "opened" or inc.severity != "critical" or inc.opened_at is None:
                continue
            start = inc.opened_at - self.within_s
            alike = [
                f
                for f in st.failures
                if f.category == inc.category and f.at is not None and start <= f.at
            ]
            if len(alike) != self.count or alike[-1].incident != inc.id:
                continue
            first = alike[0].at or inc.opened_at
            out.append(
                Judgement(
                    RULE,
                    inc.category,
                    f"failed the same way ({inc.category}) {self.count} times in "
                    f"{(inc.opened_at - first) / 60:.1f} min, each a new incident after the "
                    "one before was resolved: restarting does not fix it",
                    inc.primary.line,
                    stage=inc.stage,
                )
            )
        return out


def _judge(rules: RepeatedFailureRules, _: Blocks, __: PlaybookRules) -> Judge:
    return RepeatedFailure(rules)


KIND = Kind("repeated_failure", RepeatedFailureRules, _judge, runs=70)
