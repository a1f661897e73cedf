"""A wait repeated: the same "waiting for ..." line again and again, from one process, in one
startup stage with no progress in between - a hang written in the text, seen before the
stage's deadline (an offline log shows it too); the same line once from each of many ranks
(torch's "Waiting for pending NCCL work to finish before starting graph capture") is no
repeat. Block ``waiting``; the stall's category is the stage's
(``stalls.categories``)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from pydantic import Field

from service.classify.events import Seen
from service.classify.judgements.judge import Blocks, Config, Judge, Kind
from service.classify.judgements.judgement import Judgement
from service.classify.judgements.stalls import KIND as STALLS
from service.classify.judgements.stalls import STALL_PREFIX
from service.classify.rules import PlaybookRules
from service.classify.run_state import Waiting
from service.classify.stream_state import STARTING, StreamState
from service.parse.masking import mask

# the lines a wait is written in (Ray placement, rendezvous, peers that never join)
_WAITING = re.compile(
    r"\b(?:waiting for|still waiting|waiting on|wait for .{0,40} to "
    r"(?:start|connect|join|be ready))\b",
    re.IGNORECASE,
)


class WaitingRules(Config):
    repeats: int = Field(ge=2)
    min_span_s: float = Field(ge=0)


class Waits(Judge):
    def __init__(self, rules: WaitingRules, categories: Mapping[str, str]) -> None:
        self.rules = rules
        self.categories = categories

    def line(self, st: StreamState, seen: Seen) -> Sequence[Judgement]:
        """One more line of a starting stream that reached no new stage: a stall once the
        same wait repeated ``repeats`` times over ``min_span_s`` (when times are known)."""
        line = seen.line
        if line is None or st.status != STARTING or st.shutting_down or seen.hits.stages:
            return ()
        if not _WAITING.search(line.message[:300]):
            return ()
        template = mask(line.message)[:200]
        w = st.checks.waiting
        if w is None or w.template != template or w.stage != st.stage:
            st.checks.waiting = Waiting(template, st.stage, 1, seen.time, line.proc_key)
            return ()
        if w.process != line.proc_key:  # each rank saying it once is no repeat of one wait
            return ()
        w.count += 1
        span = (seen.time - w.first) if seen.time is not None and w.first is not None else None
        if (
            w.count < self.rules.repeats
            or (span is not None and span < self.rules.min_span_s)
            or st.current() is not None
        ):
            return ()
        stage = st.stage or "distributed_init"
        quiet = f" over {span / 60:.1f} min" if span is not None else ""
        return (
            Judgement(
                f"{STALL_PREFIX}{stage}",
                self.categories.get(stage, "unknown"),
                f"stuck in {stage}: the same wait repeated {w.count} times{quiet} with no "
                f"progress: {line.message[:300]}",
                line.text,
                role="symptom",
                stage=stage,
                stall=True,
            ),
        )


def _judge(rules: WaitingRules, blocks: Blocks, _: PlaybookRules) -> Judge:
    return Waits(rules, blocks.get(STALLS).categories)


KIND = Kind("waiting", WaitingRules, _judge, runs=40)
