"""Fleets: categories whose failures typically hit many nodes at once (block ``fleet``).

Configuration only: the grouping runs at delivery time (``service/notify``, ``service/store``
over incident bodies, :mod:`service.incidents.fleet`), which never imports the classifier;
the app hands them this block's list (:func:`prone`)."""

from __future__ import annotations

from pydantic import field_validator

from service.classify.judgements.judge import Config, Kind
from service.taxonomy import CATEGORY_TIER


class FleetRules(Config):
    prone_categories: list[str]

    @field_validator("prone_categories")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        unknown = [c for c in v if c not in CATEGORY_TIER]
        if unknown:
            raise ValueError(f"unknown categories {unknown}")
        return v


def prone(rules: FleetRules) -> frozenset[str]:
    """The fleet-prone categories (none when the block is not enabled)."""
    return frozenset(rules.prone_categories) if rules.enabled else frozenset()


KIND = Kind("fleet", FleetRules, runs=60)
