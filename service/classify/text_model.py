"""The text classifier for error-looking events no signature explains.

:meth:`TextModel.load` reads a verified artifact (:mod:`service.classify.model_artifact`,
written by ``vllm-sentinel train``); scoring is :class:`~service.classify.linear_scorer.
LinearTextScorer`'s (TF-IDF word and character n-grams of the masked key line, word
n-grams of the whole masked event, a linear SVM with sigmoid calibration, replicated from
the scikit-learn pipeline used in training). One event costs well under a millisecond.

``predict`` returns a :class:`Prediction`. When the top calibrated probability is below the
manifest's threshold (a global floor, raised per class where validation showed benign
lines resembling that class: ``class_thresholds``) the model abstains: category
``unknown``, tier ``other``, and the masked template of the event, so a novel failure is
still visible to users.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..taxonomy import CATEGORY_TIER
from .linear_scorer import LinearTextScorer
from .model_artifact import ArtifactError, load_verified
from .model_input import event_fields

__all__ = ["Prediction", "TextModel"]

UNKNOWN = "unknown"
TEMPLATE_MAX_CHARS = 600


@dataclass(frozen=True, slots=True)
class Prediction:
    """What the text model says about one event.

    ``probability`` is the calibrated probability of the top class (also when abstaining,
    so callers can see how unsure the model was); ``template`` is the masked event text;
    ``best`` is the top class, also when abstaining.
    """

    category: str
    tier: str
    probability: float
    template: str
    best: str = ""

    @property
    def abstained(self) -> bool:
        return self.category == UNKNOWN


class TextModel:
    """A verified, loaded text classifier. Build one with :meth:`load`."""

    def __init__(self, scorer: LinearTextScorer, manifest: dict[str, Any]) -> None:
        self._scorer = scorer
        self.manifest = manifest
        self.classes: tuple[str, ...] = tuple(scorer.classes)
        self.threshold = float(manifest["threshold"])
        for c in self.classes:
            if c not in CATEGORY_TIER or c == UNKNOWN:
                raise ArtifactError(f"artifact has a class outside the taxonomy: {c!r}")
        extra = manifest.get("class_thresholds") or {}
        if not isinstance(extra, dict) or any(
            c not in self.classes or not 0.0 <= float(v) <= 1.0 for c, v in extra.items()
        ):
            raise ArtifactError("invalid class_thresholds in manifest")
        # per class: the global floor, raised where benign lines resemble the class
        self.class_thresholds = {
            c: max(self.threshold, float(extra.get(c, 0.0))) for c in self.classes
        }

    # --- loading ---------------------------------------------------------------------------

    @classmethod
    def load(cls, path: Path | str) -> TextModel:
        """Load the model at ``path`` (models dir, manifest or ``.npz`` file) after checking
        its SHA-256 against the manifest. Raises :class:`ArtifactError` when anything is off."""
        scorer, manifest = load_verified(Path(path))
        return cls(scorer, manifest)

    @classmethod
    def from_scorer(cls, scorer: LinearTextScorer, threshold: float, **manifest: Any) -> TextModel:
        """Wrap an in-memory scorer (used by training and tests)."""
        return cls(scorer, {"threshold": threshold, **manifest})

    # --- prediction ------------------------------------------------------------------------

    def predict(self, text: str) -> Prediction:
        return self.predict_many([text])[0]

    def predict_many(self, texts: Iterable[str]) -> list[Prediction]:
        import numpy as np

        fields = [event_fields(t or "") for t in texts]
        if not fields:
            return []
        proba = np.vstack([self._scorer.proba(f) for f in fields])
        return self._decide([f[1] for f in fields], proba)

    def predict_proba(self, text: str) -> dict[str, float]:
        """Calibrated probability of every class for one event."""
        p = self._scorer.proba(event_fields(text or ""))
        return {c: float(p[i]) for i, c in enumerate(self.classes)}

    def _decide(self, masked: Sequence[str], proba: Any) -> list[Prediction]:
        out: list[Prediction] = []
        best = proba.argmax(axis=1)
        for i, m in enumerate(masked):
            p = float(proba[i, best[i]])
            category = self.classes[best[i]]
            template = m[:TEMPLATE_MAX_CHARS]
            if not m.strip() or p < self.class_thresholds[category]:
                out.append(Prediction(UNKNOWN, CATEGORY_TIER[UNKNOWN], p, template, category))
            else:
                out.append(Prediction(category, CATEGORY_TIER[category], p, template, category))
        return out
