"""Stalls: a startup that makes no progress past a stage within its deadline (block
``stalls``).

Checked on a timer (``Classifier.tick(now)``), not only when a line arrives: the worst
hangs print nothing; an offline log is checked at its end (or ``--now``). The deadlines and
the category of a stall per stage are rules data (the defaults fit large models); the
setting ``stall.deadlines_s`` wins when given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import model_validator

from service.classify.judgements.judge import Blocks, Config, Judge, Kind
from service.classify.judgements.judgement import Judgement
from service.classify.rules import PlaybookRules
from service.classify.stream_state import STARTING, StreamState
from service.taxonomy import CATEGORY_TIER, STAGES

STALL_PREFIX = "stall-"


class StallRules(Config):
    deadlines_s: dict[str, int | float]  # stage → seconds without reaching the next stage
    categories: dict[str, str]  # stage → the category of a stall there

    @model_validator(mode="after")
    def _known(self) -> StallRules:
        for stage in [*self.deadlines_s, *self.categories]:
            if stage not in STAGES:
                raise ValueError(f"unknown stage {stage!r}")
        for cat in self.categories.values():
            if cat not in CATEGORY_TIER:
                raise ValueError(f"unknown category {cat!r}")
        return self


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


class Stalls(Judge):
    def __init__(self, rules: StallRules) -> None:
        self.rules = rules

    def tick(self, st: StreamState, now: float) -> Sequence[Judgement]:
        """A startup stuck in its stage past the stage's deadline at ``now``, with nothing
        open yet; its category is the stage's."""
        if st.status != STARTING or st.shutting_down or st.current() is not None:
            return ()
        since = st.last_stage_change if st.last_stage_change is not None else st.first_time
        waited = overdue(st.stage, since, now, self.rules.deadlines_s)
        if waited is None:
            return ()
        return (
            Judgement(
                f"{STALL_PREFIX}{st.stage}",
                self.rules.categories.get(st.stage or "", "unknown"),
                f"stalled in {st.stage} for {waited / 60:.0f} min; last line: {st.last_line[:300]}",
                st.last_line,
                role="symptom",
                stage=st.stage,
                stall=True,
            ),
        )


def _judge(rules: StallRules, _: Blocks, __: PlaybookRules) -> Judge:
    return Stalls(rules)


KIND = Kind("stalls", StallRules, _judge, runs=10)
