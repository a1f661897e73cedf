"""Build the classifier with everything shipped in the repo: rules, the verified text model,
the novelty miner."""

from __future__ import annotations

import logging
from pathlib import Path

from service.classify.engine import Classifier
from service.classify.novelty import NoveltyDetector
from service.classify.rulebook import RuleBook
from service.classify.rules import RULES_DIR
from service.classify.text_model import ArtifactError, TextModel

log = logging.getLogger(__name__)
MODELS_DIR = Path(__file__).resolve().parents[2] / "models"


def load_text_model(models_dir: Path = MODELS_DIR) -> TextModel | None:
    """The shipped model, or None (signatures only) when it is absent; a tampered artifact
    is refused loudly rather than loaded."""
    if not (models_dir / "text_model.json").is_file():
        log.warning("no text model in %s: signatures only", models_dir)
        return None
    return TextModel.load(models_dir)


def build_classifier(use_model: bool = True, rules_dir: Path = RULES_DIR,
                     models_dir: Path = MODELS_DIR, **kwargs: object) -> Classifier:
    model = None
    if use_model:
        try:
            model = load_text_model(models_dir)
        except ArtifactError:
            raise
    return Classifier(RuleBook(rules_dir), text_model=model, novelty=NoveltyDetector(),
                      **kwargs)  # type: ignore[arg-type]
