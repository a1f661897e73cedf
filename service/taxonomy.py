"""The fixed vocabulary of ``docs/taxonomy.md``: tiers, categories, stages."""

from __future__ import annotations

from collections.abc import Mapping

TIERS = ("compatibility", "integration", "capacity", "other", "none")

CATEGORY_TIER: dict[str, str] = {
    "driver_incompatible": "compatibility",
    "gpu_not_visible": "compatibility",
    "arch_unsupported": "compatibility",
    "library_mismatch": "compatibility",
    "nccl_error": "integration",
    "mlx5_registration": "integration",
    "internode_network": "integration",
    "backend_kernel": "integration",
    "oom_weights": "capacity",
    "oom_kv_cache": "capacity",
    "oom_runtime": "capacity",
    "host_memory": "capacity",
    "config_error": "other",
    "model_unavailable": "other",
    "unknown": "other",
    "healthy": "none",
}
CATEGORIES = tuple(CATEGORY_TIER)

STAGES = (
    "container",
    "cuda_init",
    "distributed_init",
    "model_load",
    "kv_cache_init",
    "api_server",
    "serving",
)
STAGE_INDEX = {s: i for i, s in enumerate(STAGES)}

# The four families on-call cares most about (docs/taxonomy.md): never confuse them.
CRITICAL_CATEGORIES = frozenset(
    {
        "driver_incompatible",
        "nccl_error",
        "mlx5_registration",
        "oom_weights",
        "oom_kv_cache",
        "oom_runtime",
        "host_memory",
    }
)


def tier_of(category: str) -> str:
    """Tier of a category id (``other`` for an unknown id)."""
    return CATEGORY_TIER.get(category, "other")


def reached_by(timeline: Mapping[str, float], failed: str | None) -> dict[str, float]:
    """The rungs of ``timeline`` up to the stage a failure happened at (``failed``; all of
    them when None): a ladder never shows a rung after the failed one as reached, even when
    a marker of it was printed before the failure (a configuration error after
    ``Resolved architecture``, a free-memory check in ``init_device`` after the ranks' line)."""
    if failed not in STAGE_INDEX:
        return dict(timeline)
    top = STAGE_INDEX[failed]
    return {s: at for s, at in timeline.items() if STAGE_INDEX.get(s, top + 1) <= top}


def reach_before(stage: str | None, failed: str | None) -> str | None:
    """The stage a run is shown to have reached: its own, but never past its failure's."""
    if stage is None or failed not in STAGE_INDEX or stage not in STAGE_INDEX:
        return stage
    return failed if STAGE_INDEX[stage] > STAGE_INDEX[failed] else stage


def later_stage(a: str | None, b: str | None) -> str | None:
    """The later of two stages in startup order (None counts as earliest)."""
    if a is None:
        return b
    if b is None:
        return a
    return a if STAGE_INDEX[a] >= STAGE_INDEX[b] else b
