"""The fixed vocabulary of ``docs/taxonomy.md``: tiers, categories, stages."""

from __future__ import annotations

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


def later_stage(a: str | None, b: str | None) -> str | None:
    """The later of two stages in startup order (None counts as earliest)."""
    if a is None:
        return b
    if b is None:
        return a
    return a if STAGE_INDEX[a] >= STAGE_INDEX[b] else b
