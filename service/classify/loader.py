"""Build the classifier with everything shipped in the repo: rules, the verified text model,
the novelty miner.

The shipped model is verified twice before it is parsed: each file's SHA-256 against the
digests pinned in the package (:mod:`service.classify.model_pin`), then the artifact against
its manifest. A model that fails either check is not loaded: the service runs on signatures
only, says so in a warning and in ``sentinel_text_model_loaded`` / ``sentinel_model_load_
failures_total``, and never stops for it."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from service import metrics
from service.classify.engine import Classifier
from service.classify.model_artifact import ArtifactError
from service.classify.model_pin import PINNED
from service.classify.novelty import NoveltyDetector
from service.classify.rulebook import RuleBook
from service.classify.rules import RULES_DIR
from service.classify.text_model import TextModel
from service.shipped import shipped_dir

log = logging.getLogger(__name__)
MODELS_DIR = shipped_dir("models")  # the top-level models/, installed as vllm_sentinel_data.models


def check_pin(models_dir: Path, pinned: Mapping[str, str]) -> None:
    """:class:`ArtifactError` unless every pinned file hashes to its pinned digest."""
    for name, digest in pinned.items():
        try:
            actual = hashlib.sha256((models_dir / name).read_bytes()).hexdigest()
        except OSError as exc:
            raise ArtifactError(f"pinned model file not readable: {exc}") from exc
        if actual != digest:
            raise ArtifactError(
                f"{models_dir / name} is not the shipped file (sha256 "
                f"{actual[:12]}… != pinned {digest[:12]}…); refusing to load it"
            )


def load_text_model(
    models_dir: Path = MODELS_DIR, *, strict: bool = False, pinned: Mapping[str, str] | None = None
) -> TextModel | None:
    """The verified model, or None (signatures only) when it is absent or, unless
    ``strict``, when it fails verification. The shipped directory is checked against the
    pinned digests; another directory (``pinned`` None) against its own manifest only."""
    if pinned is None and models_dir.resolve() == MODELS_DIR:
        pinned = PINNED
    if not (models_dir / "text_model.json").is_file():
        log.warning("no text model in %s: signatures only", models_dir)
        metrics.MODEL_LOADED.set(0)
        return None
    try:
        if pinned:
            check_pin(models_dir, pinned)
        model = TextModel.load(models_dir)
    except ArtifactError as exc:
        metrics.MODEL_LOAD_FAILURES.inc()
        metrics.MODEL_LOADED.set(0)
        if strict:
            raise
        log.warning("text model refused, running on signatures only: %s", exc)
        return None
    metrics.MODEL_LOADED.set(1)
    return model


def build_classifier(
    use_model: bool = True,
    rules_dir: Path = RULES_DIR,
    models_dir: Path = MODELS_DIR,
    rulebook: RuleBook | None = None,
    **kwargs: Any,
) -> Classifier:
    model = load_text_model(models_dir) if use_model else None
    return Classifier(
        rulebook or RuleBook(rules_dir), text_model=model, novelty=NoveltyDetector(), **kwargs
    )
