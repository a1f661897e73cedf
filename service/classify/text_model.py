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

:meth:`TextModel.predict` remembers its latest :data:`MEMO_SIZE` answers, keyed by exactly
its inputs (the text, up to :data:`MEMO_TEXT_MAX` characters, and the context): the same
error line printed again (a crash loop, a retry, every rank of a job) costs a look-up, not
a scoring; the answer is the one scoring gave (a pure function of those inputs, frozen).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..taxonomy import CATEGORY_TIER
from .linear_scorer import LinearTextScorer
from .model_artifact import ArtifactError, load_verified
from .model_context import ModelContext
from .model_input import event_fields

__all__ = ["Prediction", "TextModel"]

UNKNOWN = "unknown"
MEMO_SIZE = 2048  # distinct (text, context) answers remembered by predict (LRU)
MEMO_TEXT_MAX = 2048  # characters: a longer text is scored each time (bounds the memo's bytes)
TEMPLATE_MAX_CHARS = 600
# words that only say a line is an error, not which one
_BARE = frozenset(
    [
        "error",
        "errors",
        "err",
        "fatal",
        "fail",
        "failed",
        "failure",
        "exception",
        "warn",
        "warning",
        "critical",
        "traceback",
    ]
)
_WORD = re.compile(r"[A-Za-z][A-Za-z_]{2,}")
_PLACEHOLDER = re.compile(r"<[A-Z_]+>")  # what masking put in place of numbers, paths ...


def _says_something(key: str) -> bool:
    """Whether the masked key line has two words beyond "error"-like ones: a bare
    ``Error:`` / ``**ERROR**`` names no failure, whatever its context says (the model
    abstains; the context alone never decides a class)."""
    words = {w.lower() for w in _WORD.findall(_PLACEHOLDER.sub(" ", key))}
    return len(words - _BARE) >= 2


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
        # (a C LRU: bounded, and safe for threads sharing the model)
        self._memo = lru_cache(maxsize=MEMO_SIZE)(self._predict_one)

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

    def predict(self, text: str, context: ModelContext | None = None) -> Prediction:
        """The model's answer for one event; ``context``: what the stream knows around it
        (:mod:`.model_context`), ``None`` for a lone text. Remembered (see above)."""
        if len(text or "") > MEMO_TEXT_MAX:
            return self._predict_one(text, context)
        return self._memo(text, context)

    def memo_size(self) -> int:
        """How many answers :meth:`predict` remembers now (at most :data:`MEMO_SIZE`)."""
        return int(self._memo.cache_info().currsize)

    def _predict_one(self, text: str, context: ModelContext | None) -> Prediction:
        return self.predict_many([text], [context])[0]

    def predict_many(
        self, texts: Iterable[str], contexts: Iterable[ModelContext | None] | None = None
    ) -> list[Prediction]:
        import numpy as np

        texts = list(texts)
        ctx = list(contexts) if contexts is not None else [None] * len(texts)
        fields = [event_fields(t or "", c) for t, c in zip(texts, ctx, strict=True)]
        if not fields:
            return []
        proba = np.vstack([self._scorer.proba(f) for f in fields])
        return self._decide([f[1] for f in fields], proba, [_says_something(f[0]) for f in fields])

    def predict_proba(self, text: str, context: ModelContext | None = None) -> dict[str, float]:
        """Calibrated probability of every class for one event."""
        p = self._scorer.proba(event_fields(text or "", context))
        return {c: float(p[i]) for i, c in enumerate(self.classes)}

    def _decide(
        self, masked: Sequence[str], proba: Any, informative: Sequence[bool]
    ) -> list[Prediction]:
        out: list[Prediction] = []
        best = proba.argmax(axis=1)
        for i, m in enumerate(masked):
            p = float(proba[i, best[i]])
            category = self.classes[best[i]]
            template = m[:TEMPLATE_MAX_CHARS]
            if not informative[i]:  # no lean either: nothing to name
                out.append(Prediction(UNKNOWN, CATEGORY_TIER[UNKNOWN], p, template, ""))
            elif p < self.class_thresholds[category]:
                out.append(Prediction(UNKNOWN, CATEGORY_TIER[UNKNOWN], p, template, category))
            else:
                out.append(Prediction(category, CATEGORY_TIER[category], p, template, category))
        return out
