"""Warnings from vLLM's periodic stats lines: KV cache saturated, waiting queue growing,
preemptions, prefix cache hit rate stuck at 0 % while prompts are served. Never pages. The
thresholds are rules data (block ``serving``); what the lines showed so far is kept in the
run's state (:class:`~service.classify.run_state.ServingStats`)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from pydantic import Field

from service.classify.events import Seen
from service.classify.judgements.judge import Blocks, Config, Judge, Kind
from service.classify.judgements.judgement import Judgement
from service.classify.rules import PlaybookRules
from service.classify.run_state import ServingStats
from service.classify.stream_state import StreamState
from service.parse import line as L


class ServingRules(Config):
    kv_high_pct: float = Field(gt=0, le=100)
    kv_high_lines: int = Field(ge=1)
    queue_growing_lines: int = Field(ge=2)
    queue_min: int = Field(ge=0)
    hit_zero_lines: int = Field(ge=1)


# V0: "... Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 0.1%, ..."
# V1: "Engine 000: ... Running: 1 reqs, Waiting: 0 reqs[, Deferred: 0 reqs][, KV fetch: ...]
#      [, Preemptions: 2], GPU KV cache usage: 0.1%, Prefix cache hit rate: 40.0%"
#      (Preemptions: those of the interval, printed when not 0; CPU builds say "CPU KV cache")
_STATS = re.compile(
    r"Avg prompt throughput: (?P<prompt>[\d.]+) tokens/s, Avg generation throughput: (?P<gen>[\d.]+)"
    r" tokens/s, Running: (?P<running>\d+) reqs, (?:Swapped: (?P<swapped>\d+) reqs, )?"
    r"(?:Pending|Waiting): (?P<waiting>\d+) reqs(?:, Deferred: \d+ reqs)?"
    r"(?:, KV fetch: \d+ waiting to start, \d+ in progress, \d+ completed waiting)?"
    r"(?:, Preemptions: (?P<preempt>\d+))?, (?P<dev>GPU|CPU|XPU) KV cache usage: (?P<kv>[\d.]+)%"
)
_HIT = re.compile(r"Prefix cache hit rate: (?:GPU: )?(?P<hit>[\d.]+)%")


def _pcts(values: list[float]) -> str:
    return ", ".join(f"{v:.1f}%" for v in values)


def judge(
    message: str, state: ServingStats, prefix_caching_expected: bool, rules: ServingRules
) -> list[Judgement]:
    """Update ``state`` (kept in the stream's state) with one stats line; return warnings,
    each with the numbers that triggered it (thresholds: ``rules``)."""
    m = _STATS.search(message)
    if m is None:
        return []
    out: list[Judgement] = []
    kv_s, dev, waiting_s, running_s, prompt_s, swapped_s, preempt_s = m.group(
        "kv", "dev", "waiting", "running", "prompt", "swapped", "preempt"
    )
    kv = float(kv_s)
    waiting = int(waiting_s)
    running = int(running_s)
    prompt = float(prompt_s)
    kvs = state.kv
    kvs.append(kv)
    del kvs[: -rules.kv_high_lines]
    state.kv_high = state.kv_high + 1 if kv >= rules.kv_high_pct else 0
    if state.kv_high == rules.kv_high_lines:
        out.append(
            Judgement(
                "kv-cache-saturated",
                "oom_runtime",
                f"{dev} KV cache usage ≥ {rules.kv_high_pct:.0f}% on the last "
                f"{rules.kv_high_lines} stats lines ({_pcts(kvs)}); {running} running, "
                f"{waiting} waiting",
            )
        )
    queue = state.waiting
    queue.append(waiting)
    del queue[: -rules.queue_growing_lines]
    if (
        len(queue) == rules.queue_growing_lines
        and queue[-1] >= rules.queue_min
        and all(b > a for a, b in zip(queue, queue[1:], strict=False))
        and not state.queue_warned
    ):
        state.queue_warned = True
        out.append(
            Judgement(
                "waiting-queue-growing",
                "oom_runtime",
                f"waiting requests grew on the last {rules.queue_growing_lines} stats "
                f"lines: {' → '.join(map(str, queue))} ({running} running, "
                f"{dev} KV cache usage {kv:.1f}%)",
            )
        )
    elif queue and queue[-1] == 0:
        state.queue_warned = False
    swapped = int(swapped_s or 0)
    preempt = int(preempt_s or 0)
    if (preempt or swapped) and not state.preempt_warned:
        state.preempt_warned = True
        what = f"{preempt} preemptions" if preempt else f"{swapped} requests swapped out"
        out.append(
            Judgement(
                "requests-preempted",
                "oom_runtime",
                f"{what} in one stats interval ({dev} KV cache usage {kv:.1f}%, "
                f"{running} running, {waiting} waiting)",
            )
        )
    h = _HIT.search(message, m.end())
    if h is not None and prefix_caching_expected and prompt > 0:
        hit = float(h.group("hit"))
        state.hit_zero = state.hit_zero + 1 if hit == 0.0 else 0
        prompts = state.prompt
        prompts.append(prompt)
        del prompts[: -rules.hit_zero_lines]
        if state.hit_zero == rules.hit_zero_lines:
            out.append(
                Judgement(
                    "prefix-cache-hit-zero",
                    "config_error",
                    f"prefix cache hit rate 0.0% on the last {rules.hit_zero_lines} stats "
                    f"lines with prompts being served (prompt throughput "
                    f"{', '.join(f'{p:g}' for p in prompts)} tokens/s)",
                )
            )
    return out


class Serving(Judge):
    def __init__(self, rules: ServingRules) -> None:
        self.rules = rules

    def line(self, st: StreamState, seen: Seen) -> Sequence[Judgement]:
        """A stats line of a serving stream (the quiet path's, or one a rule looked at)."""
        line = seen.line
        if line is None:
            text = seen.text  # (the quiet path takes stats lines only)
        elif seen.hits.serving and "throughput" in line.message and not st.shutting_down:
            text = line.text
        else:
            return ()
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
        found = judge(text, st.checks.stats, expected, self.rules)
        if not found:  # the common case: no line to clean
            return ()
        cleaned = L.clean(text)
        return [Judgement(j.rule, j.category, j.detail, cleaned) for j in found]


def _judge(rules: ServingRules, _: Blocks, __: PlaybookRules) -> Judge:
    return Serving(rules)


KIND = Kind("serving", ServingRules, _judge, runs=30)


_CONCURRENCY = re.compile(
    r"(?:(?P<dev>GPU|CPU|XPU) KV cache size: (?P<tokens>[\d,]+) tokens, )?"
    r"Maximum concurrency for (?P<len>[\d,]+) tokens per request: "
    r"(?P<x>[\d.]+)x"
)
_PREEMPT = re.compile(r"total_num_cumulative_preemption=(?P<n>\d+)")


def line_detail(rule: str | None, line: str) -> str | None:
    """The numbers of a warning found on one line (a signature), for its detail."""
    if rule == "kv-cache-barely-fits":
        m = _CONCURRENCY.search(line)
        if m:
            size = (
                f" ({m.group('dev')} KV cache size {m.group('tokens')} tokens)"
                if m.group("tokens")
                else ""
            )
            return (
                f"the KV cache holds {m.group('x')}x a full-length request of "
                f"{m.group('len')} tokens{size}: fewer than 2"
            )
    if rule == "requests-preempted":
        m = _PREEMPT.search(line)
        if m:
            return f"{m.group('n')} requests preempted so far (not enough KV cache space)"
    return None
