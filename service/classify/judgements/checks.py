"""Checks over a stream rather than one line, each returning typed :class:`Judgement`
records the engine attaches (never an incident of its own making):

* :func:`waiting` - the same "waiting for ..." line again and again in one startup stage with
  no progress in between: a hang written in the text (an offline log shows it too);
* :func:`startup` - settings a model is known to need, checked when the server is ready;
* :func:`serving_stats` - vLLM's periodic stats lines (:mod:`.serving`);
* :func:`stall` - a startup stuck in one stage past its deadline (:mod:`.stalls`; the service
  checks on a timer, an offline log at its end).

Each reads the stream's state and keeps what it counts in ``StreamState.extra`` (saved with
the stream, reset by a new run); counts, thresholds, categories and model lists come from
``rules/judgements.yaml`` (:class:`~service.classify.rules.JudgementRules`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from service.classify.judgements import serving, stalls
from service.classify.judgements.judgement import Judgement
from service.classify.rules import PrefixCachingModel, ServingRules, StallRules, WaitingRules
from service.classify.run_state import ServingStats, Waiting
from service.classify.stream_state import STARTING, StreamState
from service.parse import line as L
from service.parse.masking import mask

# the lines a wait is written in (Ray placement, rendezvous, peers that never join)
_WAITING = re.compile(
    r"\b(?:waiting for|still waiting|waiting on|wait for .{0,40} to "
    r"(?:start|connect|join|be ready))\b",
    re.IGNORECASE,
)


def waiting(
    st: StreamState,
    line: L.Line,
    time: float | None,
    rules: WaitingRules,
    categories: Mapping[str, str],
) -> Judgement | None:
    """One more line of a starting stream that reached no new stage: a stall once the same
    wait repeated ``rules.repeats`` times over ``rules.min_span_s`` (when times are known);
    its category is the stage's stall category (``categories``)."""
    if not _WAITING.search(line.message[:300]):
        return None
    template = mask(line.message)[:200]
    w = st.checks.waiting
    if w is None or w.template != template or w.stage != st.stage:
        st.checks.waiting = Waiting(template, st.stage, 1, time)
        return None
    w.count += 1
    first = w.first
    span = (time - first) if time is not None and first is not None else None
    if (
        w.count < rules.repeats
        or (span is not None and span < rules.min_span_s)
        or st.current() is not None
    ):
        return None
    stage = st.stage or "distributed_init"
    quiet = f" over {span / 60:.1f} min" if span is not None else ""
    return Judgement(
        f"{stalls.STALL_PREFIX}{stage}",
        categories.get(stage, "unknown"),
        f"stuck in {stage}: the same wait repeated {w.count} times{quiet} with no "
        f"progress: {line.message[:300]}",
        line.text,
        role="symptom",
        stage=stage,
        stall=True,
    )


def startup(
    st: StreamState, line: L.Line, off_by_default: list[PrefixCachingModel]
) -> list[Judgement]:
    """The server is ready: a model served with prefix caching off by default although it
    needs it (``off_by_default``), and not enabled."""
    if st.facts.get("enable_prefix_caching") == "True":
        return []
    model = st.facts.get("model", "").lower().replace("_", "-")
    return [
        Judgement(
            f"prefix-caching-off-{m.id}",
            "config_error",
            f"{m.name} runs without --enable-prefix-caching (off by default for it): "
            "shared prompts are recomputed",
            line.text,
        )
        for m in off_by_default
        if m.id in model
    ]


def serving_stats(st: StreamState, text: str, rules: ServingRules) -> list[Judgement]:
    """One stats line of a serving stream: capacity and prefix-cache warnings."""
    # a 0% hit rate matters where prefix caching was asked for: vLLM V1 turns it on by
    # default, so with the non-default args known, only an explicit flag expects hits
    args = st.facts.get("non_default_args")
    expected = (
        "'enable_prefix_caching': True" in args
        if args is not None
        else st.facts.get("enable_prefix_caching") == "True"
    )
    if st.checks.stats is None:
        st.checks.stats = ServingStats()
    state = st.checks.stats
    found = serving.judge(text, state, expected, rules)
    if not found:  # the common case: no line to clean
        return []
    line = L.clean(text)
    return [Judgement(j.rule, j.category, j.detail, line) for j in found]


def stall(
    st: StreamState, now: float, deadlines: Mapping[str, float], rules: StallRules
) -> Judgement | None:
    """A startup stuck in its stage past the stage's deadline (``deadlines``: the settings'
    or ``rules.deadlines_s``) at ``now`` (the service's clock, or the end of an offline log /
    ``--now``), with nothing open yet; its category is the stage's (``rules.categories``)."""
    if st.status != STARTING or st.shutting_down or st.current() is not None:
        return None
    since = st.last_stage_change if st.last_stage_change is not None else st.first_time
    waited = stalls.overdue(st.stage, since, now, deadlines)
    if waited is None:
        return None
    return Judgement(
        f"{stalls.STALL_PREFIX}{st.stage}",
        rules.categories.get(st.stage or "", "unknown"),
        f"stalled in {st.stage} for {waited / 60:.0f} min; last line: {st.last_line[:300]}",
        st.last_line,
        role="symptom",
        stage=st.stage,
        stall=True,
    )
