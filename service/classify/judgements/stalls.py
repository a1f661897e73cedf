"""Stall detection: a startup that makes no progress past a stage within its deadline.

Checked on a timer (``Classifier.tick(now)``), not only when a line arrives: the worst
hangs print nothing. Defaults fit large models (Kimi K3 may load for tens of minutes).
"""

from __future__ import annotations

DEFAULT_DEADLINES_S: dict[str, float] = {
    "container": 600,
    "cuda_init": 600,
    "distributed_init": 900,
    "model_load": 3600,
    "kv_cache_init": 2400,
    "api_server": 600,
}
# The tier follows the stage: a hang in distributed init is an integration problem.
STALL_CATEGORY: dict[str, str] = {
    "container": "unknown",
    "cuda_init": "gpu_not_visible",
    "distributed_init": "internode_network",
    "model_load": "unknown",
    "kv_cache_init": "backend_kernel",
    "api_server": "unknown",
}
STALL_PREFIX = "stall-"


def overdue(
    stage: str | None, since: float | None, now: float, deadlines: dict[str, float]
) -> float | None:
    """Seconds the stream has been stuck in ``stage`` when past its deadline, else None."""
    if stage is None or since is None or stage not in deadlines:
        return None
    waited = now - since
    return waited if waited > deadlines[stage] else None


def is_stall(rule: str | None) -> bool:
    return bool(rule and rule.startswith(STALL_PREFIX))
