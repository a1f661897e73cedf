"""What the templates show, computed in Python: times and ages, the startup ladder, the facts
in on-call order, the silence an incident suggests, a stream's state and time in stage."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TypedDict, TypeGuard

from service.notify.routing import row_fields
from service.parse.line import parse_line
from service.store.views import DeliveryView, IncidentView
from service.taxonomy import STAGE_INDEX, STAGES
from service.ui.data import StreamRow

# a timeline value this large is an epoch time; smaller ones are line numbers (a log
# without timestamps)
EPOCH_MIN = 1e8
LADDER_LABEL = {
    "container": "Container",
    "cuda_init": "Config / CUDA init",  # argument and config validation are this stage too
    "distributed_init": "Distributed init",
    "model_load": "Model load",
    "kv_cache_init": "KV cache init",
    "api_server": "API server",
    "serving": "Serving",
}
# facts in the order on-call reads them (label, key); the rest follow alphabetically
FACT_ORDER = (
    ("Image", "image"),
    ("vLLM", "vllm_version"),
    ("Driver", "driver_version"),
    ("Driver branch", "driver_branch"),
    ("CUDA (driver)", "driver_cuda"),
    ("CUDA (image)", "image_cuda"),
    ("GPU", "gpu_model"),
    ("Compute capability", "compute_capability"),
    ("GPU memory", "gpu_total_memory"),
    ("Torch", "torch_version"),
    ("NCCL", "nccl_version"),
    ("Model", "model"),
    ("Tensor parallel", "tensor_parallel_size"),
    ("Pipeline parallel", "pipeline_parallel_size"),
    ("Data parallel", "data_parallel_size"),
    ("Max model len", "max_model_len"),
    ("GPU memory utilisation", "gpu_memory_utilization"),
    ("Max num seqs", "max_num_seqs"),
    ("dtype", "dtype"),
    ("KV cache dtype", "kv_cache_dtype"),
    ("Quantization", "quantization"),
    ("Prefix caching", "enable_prefix_caching"),
    ("Arguments", "non_default_args"),
)
SILENCE_KEYS = ("category", "namespace", "node", "pod", "container", "stage", "tier", "severity")
SILENCE_DEFAULT = ("category", "namespace")
DURATIONS = (
    ("1h", "1 hour"),
    ("2h", "2 hours"),
    ("4h", "4 hours"),
    ("8h", "8 hours"),
    ("1d", "1 day"),
    ("3d", "3 days"),
    ("1w", "1 week"),
)


class Rung(TypedDict):
    """One stage of an incident's startup ladder."""

    stage: str
    label: str
    state: str  # passed | passed-untimed | failed | reached | not-reached
    at: float | None
    at_text: str
    offset: str
    resolved: bool


class SilenceCandidate(TypedDict):
    key: str
    value: str
    checked: bool


class StreamStateView(TypedDict):
    """A stream's state now, for the streams page."""

    state: str
    stage: str | None
    in_stage: float | None
    in_stage_text: str
    since: float | None
    deadline: float | None


def is_epoch(v: Any) -> TypeGuard[int | float]:
    return isinstance(v, int | float) and not isinstance(v, bool) and v >= EPOCH_MIN


def fmt_time(t: Any) -> str:
    """``2026-12-02 14:39:21 UTC``; a line number for a log without times; ``—`` for none."""
    if t is None:
        return "—"
    if not is_epoch(t):
        return f"line {int(t)}" if isinstance(t, int | float) else str(t)
    return datetime.fromtimestamp(float(t), UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def iso_time(t: Any) -> str:
    if not is_epoch(t):
        return ""
    return datetime.fromtimestamp(float(t), UTC).isoformat().replace("+00:00", "Z")


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min" + (f" {s % 60} s" if s < 600 and s % 60 else "")
    if s < 86400:
        return f"{s // 3600} h" + (f" {s % 3600 // 60} min" if s % 3600 // 60 else "")
    return f"{s // 86400} d" + (f" {s % 86400 // 3600} h" if s % 86400 // 3600 else "")


def fmt_ago(t: Any, now: float) -> str:
    if not is_epoch(t):
        return "—"
    d = now - float(t)
    if d < 0:
        return "in " + fmt_duration(-d)
    return fmt_duration(d) + " ago"


def age_class(t: Any, now: float) -> str:
    """``age-new`` (< 1 h), ``age-day`` (< 24 h), ``age-old``."""
    if not is_epoch(t):
        return "age-old"
    d = now - float(t)
    return "age-new" if d < 3600 else "age-day" if d < 86400 else "age-old"


def driver_branch(facts: Mapping[str, Any]) -> str | None:
    v = str(facts.get("driver_version") or "")
    m = re.match(r"(\d{3})\.", v)
    return f"r{m.group(1)}" if m else None


def facts_rows(
    facts: Mapping[str, Any], meta: Mapping[str, Any] | None = None
) -> list[tuple[str, str, str]]:
    """(label, key, value) for every known fact: the on-call order first, then the rest."""
    shown = dict(facts or {})
    if "image" not in shown and meta and meta.get("image"):
        shown["image"] = meta["image"]
    branch = driver_branch(shown)
    if branch and "driver_branch" not in shown:
        shown["driver_branch"] = branch
    rows = [
        (label, key, str(shown[key]))
        for label, key in FACT_ORDER
        if shown.get(key) not in (None, "")
    ]
    known = {k for _, k in FACT_ORDER}
    rows += [
        (k.replace("_", " "), k, str(v))
        for k, v in sorted(shown.items())
        if k not in known and v not in (None, "")
    ]
    return rows


class Placed(TypedDict):
    """What the ladder reads of an incident: its stage, status and the run's timeline."""

    stage: str
    status: str
    timeline: dict[str, float]


class FailingRun(TypedDict):
    """The run a crash loop's ladder shows: its latest failed start (``attempt``, counted
    from 1), when it started and failed (epoch, or None when not known)."""

    attempt: int
    started: float | None
    failed: float | None


def failing_run(extra: Mapping[str, Any]) -> FailingRun | None:
    """The latest failed start of an incident that failed more than once (its
    ``extra.attempts``), else None (one run: the incident's own times are that run's)."""
    attempts = extra.get("attempts") or []
    if len(attempts) < 2:
        return None
    last = attempts[-1]
    started, failed = last.get("started"), last.get("failed")
    return {
        "attempt": int(last.get("attempt") or len(attempts)),
        "started": float(started) if is_epoch(started) else None,
        "failed": float(failed) if is_epoch(failed) else None,
    }


def one_run(timeline: Mapping[str, float], run: FailingRun | None) -> dict[str, float]:
    """The timeline with only ``run``'s stage times: a time before it started (an earlier
    attempt's) is left out, so a ladder never mixes attempts."""
    if run is None or run["started"] is None:
        return dict(timeline)
    start = run["started"]
    return {s: t for s, t in timeline.items() if not is_epoch(t) or float(t) >= start}


def ladder(inc: Placed) -> list[Rung]:
    """The startup ladder of one incident: every stage in order with when it was reached and
    its state: ``passed`` (the run went beyond it), ``failed`` (the incident's stage),
    ``reached`` (marked, when the incident has no stage), ``not-reached`` (every rung after
    the failed one, whatever markers were printed before the failure)."""
    timeline = inc.get("timeline") or {}
    failed = inc.get("stage")
    failed_i = STAGE_INDEX.get(failed, -1) if failed else -1
    resolved = inc.get("status") == "resolved"
    first = next((timeline[s] for s in STAGES if is_epoch(timeline.get(s))), None)
    rungs: list[Rung] = []
    for i, stage in enumerate(STAGES):
        at = timeline.get(stage)
        if stage == failed:
            state = "failed"
        elif failed_i >= 0 and i < failed_i:
            state = "passed"
        elif failed_i >= 0:
            state, at = "not-reached", None
        elif at is not None:
            state = "reached"
        else:
            state = "not-reached"
        if state == "passed" and at is None:
            state = "passed-untimed"  # no line marked it, but the run got beyond it
        rungs.append(
            {
                "stage": stage,
                "label": LADDER_LABEL[stage],
                "state": state,
                "at": at,
                "at_text": fmt_time(at) if at is not None else "",
                "offset": (
                    f"+{fmt_duration(float(at) - float(first))}"
                    if is_epoch(at) and first is not None
                    else ""
                ),
                "resolved": resolved,
            }
        )
    return rungs


def bare(text: str | None) -> str:
    """A log line without its process, level, time and source prefix (``(EngineCore pid=9)
    ERROR 12-02 10:00:01 [core.py:1510]``): the message the rules read; the line itself when
    nothing else is left."""
    if not text:
        return ""
    message = parse_line(text).message
    return message if message.strip() else text


def ladder_state_text(state: str) -> str:
    return {
        "passed": "passed",
        "passed-untimed": "passed (no line marked it)",
        "failed": "failed here",
        "reached": "reached",
        "not-reached": "not reached",
    }[state]


def silence_candidates(inc: IncidentView) -> list[SilenceCandidate]:
    """Matchers an incident suggests for "silence similar": (key, value, checked)."""
    values = row_fields(inc)
    return [
        {"key": k, "value": str(values[k]), "checked": k in SILENCE_DEFAULT}
        for k in SILENCE_KEYS
        if values.get(k) not in (None, "")
    ]


def stream_state(st: StreamRow, now: float, deadlines: Mapping[str, float]) -> StreamStateView:
    """What the streams page shows: the state (``starting``, ``stalled``, ``ready``,
    ``serving``, ``failed``, ``stopped``), the stage and how long it has been in it."""
    status = st.get("status") or "starting"
    stage = st.get("stage")
    since = st.get("last_stage_change")
    if not is_epoch(since):
        at = (st.get("timeline") or {}).get(stage) if stage else None
        since = at if is_epoch(at) else None
    last = st.get("last_time") if is_epoch(st.get("last_time")) else st.get("updated_at")
    live_end = now if status in ("starting", "ready", "serving") else (last or now)
    in_stage = (live_end - float(since)) if since is not None else None
    stalled = any(i.get("stall") for i in st.get("open_incidents") or [])
    deadline = deadlines.get(stage or "") if status == "starting" else None
    if deadline and in_stage is not None and in_stage > deadline:
        stalled = True
    state = "stalled" if stalled and status in ("starting", "failed") else status
    return {
        "state": state,
        "stage": stage,
        "in_stage": in_stage,
        "in_stage_text": fmt_duration(in_stage),
        "since": since,
        "deadline": deadline,
    }


def held_until(deliveries: list[DeliveryView], now: float) -> float | None:
    """When the first page of an incident still held back (the fleet hold) may go: its
    deliveries are all pending, never tried, and due later; None otherwise."""
    if not deliveries or any(d["status"] != "pending" or d["attempts"] for d in deliveries):
        return None
    due = min(d["next_attempt_at"] for d in deliveries)
    return due if due > now else None
