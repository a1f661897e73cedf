"""What one message matched in the rule book's one scan (:meth:`RuleBook.scan`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from service.classify.rules import Signature


@dataclass(slots=True)
class Hits:
    """The stages, status markers, facts and signatures one message matched."""

    stages: list[str]
    ready: bool
    serving: bool
    run_start: bool
    shutdown: bool
    facts: list[tuple[str, str]]
    signatures: list[tuple[Signature, Any]]
    benign: bool = False

    def looked_at(self) -> bool:
        """Whether any rule looks at the line (the block scanner feeds only those)."""
        return bool(
            self.stages
            or self.facts
            or self.signatures
            or self.ready
            or self.serving
            or self.shutdown
        )


NO_HITS = Hits([], False, False, False, False, [], [])  # (never changed)
