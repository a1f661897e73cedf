"""Durable state: incidents, stream snapshots, source positions, outbox and deliveries."""

from service.store.deliveries import Claim, ClaimedEvent
from service.store.effects import (
    BatchEffects,
    DuplicateChunk,
    IncidentWrite,
    PositionAdvance,
    QuarantineRecord,
    StaleBatch,
    collapse_kinds,
)
from service.store.store import Store

__all__ = [
    "BatchEffects",
    "Claim",
    "ClaimedEvent",
    "DuplicateChunk",
    "IncidentWrite",
    "PositionAdvance",
    "QuarantineRecord",
    "StaleBatch",
    "Store",
    "collapse_kinds",
]
