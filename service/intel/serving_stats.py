"""Warnings from vLLM's periodic stats lines: KV cache saturated, waiting queue growing,
preemptions, prefix cache hit rate stuck at 0 % while prompts are served. Never pages."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# V0: "... Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 0.1%, ..."
# V1: "Engine 000: ... Running: 1 reqs, Waiting: 0 reqs[, Deferred: 0 reqs][, Preemptions: 2],
#      GPU KV cache usage: 0.1%, Prefix cache hit rate: 40.0%"
_STATS = re.compile(
    r"Avg prompt throughput: (?P<prompt>[\d.]+) tokens/s, Avg generation throughput: (?P<gen>[\d.]+)"
    r" tokens/s, Running: (?P<running>\d+) reqs, (?:Swapped: (?P<swapped>\d+) reqs, )?"
    r"(?:Pending|Waiting): (?P<waiting>\d+) reqs(?:, Deferred: \d+ reqs)?"
    r"(?:, Preemptions: (?P<preempt>\d+))?, (?:GPU|CPU|XPU) KV cache usage: (?P<kv>[\d.]+)%"
)
_HIT = re.compile(r"Prefix cache hit rate: (?:GPU: )?(?P<hit>[\d.]+)%")

KV_HIGH_PCT = 95.0
KV_HIGH_LINES = 3
QUEUE_GROWING_LINES = 5
QUEUE_MIN = 10
HIT_ZERO_LINES = 6


@dataclass(frozen=True, slots=True)
class Judgement:
    rule: str
    category: str
    detail: str


def judge(message: str, state: dict[str, Any], prefix_caching_expected: bool) -> list[Judgement]:
    """Update ``state`` (kept in the stream's state) with one stats line; return warnings."""
    m = _STATS.search(message)
    if m is None:
        return []
    out: list[Judgement] = []
    kv = float(m.group("kv"))
    waiting = int(m.group("waiting"))
    prompt = float(m.group("prompt"))
    state["kv_high"] = state.get("kv_high", 0) + 1 if kv >= KV_HIGH_PCT else 0
    if state["kv_high"] == KV_HIGH_LINES:
        out.append(Judgement("kv-cache-saturated", "oom_runtime",
                             f"GPU KV cache usage ≥ {KV_HIGH_PCT:.0f}% on {KV_HIGH_LINES} "
                             f"consecutive stats lines (now {kv:.1f}%, {waiting} waiting)"))
    queue = state.setdefault("waiting", [])
    queue.append(waiting)
    del queue[:-QUEUE_GROWING_LINES]
    if (len(queue) == QUEUE_GROWING_LINES and queue[-1] >= QUEUE_MIN
            and all(b > a for a, b in zip(queue, queue[1:], strict=False))
            and not state.get("queue_warned")):
        state["queue_warned"] = True
        out.append(Judgement("waiting-queue-growing", "oom_runtime",
                             f"waiting requests grew on {QUEUE_GROWING_LINES} consecutive stats "
                             f"lines: {', '.join(map(str, queue))}"))
    elif queue and queue[-1] == 0:
        state["queue_warned"] = False
    swapped = int(m.group("swapped") or 0)
    preempt = int(m.group("preempt") or 0)
    if (preempt or swapped) and not state.get("preempt_warned"):
        state["preempt_warned"] = True
        what = f"{preempt} preemptions" if preempt else f"{swapped} requests swapped out"
        out.append(Judgement("requests-preempted", "oom_runtime",
                             f"{what} in one stats interval: the KV cache is too small for the load"))
    h = _HIT.search(message, m.end())
    if h is not None and prefix_caching_expected and prompt > 0:
        hit = float(h.group("hit"))
        state["hit_zero"] = state.get("hit_zero", 0) + 1 if hit == 0.0 else 0
        if state["hit_zero"] == HIT_ZERO_LINES:
            out.append(Judgement("prefix-cache-hit-zero", "config_error",
                                 f"prefix cache hit rate stayed at 0% over {HIT_ZERO_LINES} stats "
                                 f"lines while prompts were served: caching is off or prompts "
                                 f"share no prefix"))
    return out
