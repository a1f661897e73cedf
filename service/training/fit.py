"""Train the text classifier and write a verified artifact: ``vllm-sentinel train``.

Steps (each reported on stderr):

1. Load the examples and the out-of-taxonomy texts (:mod:`service.training.examples`),
   with corrections from feedback if given; the held-out evaluation sets are refused.
2. Mask them, drop duplicates, cap each family, group families whose masked texts
   coincide (:func:`service.training.examples.prepare`).
3. Grouped cross-validation (:mod:`service.training.crossval`): held-out scores, and the
   abstain thresholds (:mod:`service.training.thresholds`).
4. Refit the recipe (:mod:`service.training.recipe`) on all the data, export it to plain
   arrays (``text_model.npz``) checked to reproduce the scikit-learn pipeline
   (:mod:`service.training.export`), and write the manifest (``text_model.json``: SHA-256,
   classes, thresholds, versions, counts, scores) and a generated ``MODEL_CARD.md``
   (:mod:`service.training.card`). Writing the shipped ``models/`` also rewrites the pin
   (:mod:`service.training.pin`).

Same data + same seed -> same splits, thresholds, scores and artifact bytes.
"""

from __future__ import annotations

import json
import platform
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from service.classify.loader import MODELS_DIR
from service.classify.model_artifact import MANIFEST_FORMAT, sha256_bytes
from service.classify.model_input import event_fields
from service.classify.text_model import TextModel
from service.parse.masking import mask

from .card import model_card
from .crossval import cross_validate
from .examples import ORIGIN_THREAD, Example, load_examples, prepare
from .export import export
from .pin import write_pin
from .recipe import MODEL_CONFIG, fit_pipeline

__all__ = ["ARTIFACT_NAME", "CARD_NAME", "MANIFEST_NAME", "train"]

ARTIFACT_NAME = "text_model.npz"
MANIFEST_NAME = "text_model.json"
CARD_NAME = "MODEL_CARD.md"


class _Progress:
    """Step-by-step progress on stderr (elapsed time per step)."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self.t0 = time.perf_counter()
        self.step_t = self.t0

    def __call__(self, msg: str) -> None:
        now = time.perf_counter()
        if not self.quiet:
            print(f"[train {now - self.t0:6.1f}s] {msg}", file=sys.stderr, flush=True)
        self.step_t = now

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0


def _subset(examples: list[Example], max_examples: int, seed: int) -> list[Example]:
    """A seeded subset of about ``max_examples``, the same share of every class."""
    rng = np.random.default_rng(seed)
    by_cat: dict[str, list[Example]] = defaultdict(list)
    for ex in examples:
        by_cat[ex.category].append(ex)
    per = max(4, max_examples // max(1, len(by_cat)))
    sub: list[Example] = []
    for cat in sorted(by_cat):
        items = by_cat[cat]
        if len(items) > per:
            items = [items[i] for i in sorted(rng.choice(len(items), per, replace=False))]
        sub.extend(items)
    return sub


def train(
    data_dir: Path,
    out_dir: Path,
    seed: int = 0,
    feedback: Path | None = None,
    *,
    config: dict[str, Any] | None = None,
    quiet: bool = False,
    max_examples: int | None = None,
) -> dict[str, Any]:
    """Train on ``data_dir``, write the artifact, manifest and model card to ``out_dir``.

    Returns the manifest (a dict). ``max_examples`` trains on a seeded stratified subset
    (for quick tests); ``config`` overrides :data:`MODEL_CONFIG` keys.
    """
    import sklearn

    cfg = dict(MODEL_CONFIG)
    if config:
        cfg.update(config)
    progress = _Progress(quiet)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    progress(f"loading examples from {data_dir}")
    raw, ood_raw = load_examples(Path(data_dir), feedback)
    progress(f"{len(raw)} labelled examples, {len(ood_raw)} out-of-taxonomy texts; masking")
    examples = prepare(raw, cfg["max_per_family"], seed, cfg.get("max_generated_per_family"))
    if max_examples is not None and len(examples) > max_examples:
        examples = _subset(examples, max_examples, seed)
    known = {e.masked for e in examples}
    ood_fields = sorted(
        {event_fields(e.text, e.context) for e in ood_raw if mask(e.text) not in known}
    )
    texts = [(e.key, e.masked, e.ctx) for e in examples]
    y = np.array([e.category for e in examples])
    groups = np.array([e.group for e in examples])
    counts = Counter(y.tolist())
    progress(
        f"{len(examples)} distinct masked examples in {len(set(groups.tolist()))} groups, "
        f"{len(counts)} classes"
    )

    real = np.array([e.origin == ORIGIN_THREAD for e in examples])
    asked = np.array([e.asked for e in examples])
    cv = cross_validate(cfg, seed, texts, y, groups, ood_fields, progress, real, asked)
    classes, scores, threshold, class_thr = cv.classes, cv.scores, cv.threshold, cv.class_thresholds
    progress(f"abstain threshold {threshold:.2f}, per class {class_thr}")
    progress(
        f"held-out macro-F1 {scores['macro_f1']:.4f} (no abstain "
        f"{scores['macro_f1_no_abstain']:.4f}), abstain {scores['abstain_rate']:.3f}, "
        f"healthy false alarms {scores['healthy_false_alarms']}"
    )

    progress("fitting the final model on all examples")
    final = fit_pipeline(cfg, seed, texts, y, groups)
    check = [texts[i] for i in range(0, len(texts), max(1, len(texts) // 300))]
    data, reloaded = export(final, check)
    model = TextModel.from_scorer(reloaded, threshold, class_thresholds=class_thr)
    t0 = time.perf_counter()
    sample = [e.text for e in examples[: min(300, len(examples))]]
    for t in sample:
        model.predict(t)
    latency_ms = (time.perf_counter() - t0) / max(1, len(sample)) * 1000

    artifact = out_dir / ARTIFACT_NAME
    artifact.write_bytes(data)
    manifest = {
        "format": MANIFEST_FORMAT,
        "artifact": ARTIFACT_NAME,
        "sha256": sha256_bytes(data),
        "classes": classes,
        "threshold": threshold,
        "class_thresholds": class_thr,
        "seed": seed,
        "config": {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()},
        "versions": {
            "python": platform.python_version(),
            "sklearn": sklearn.__version__,
            "numpy": np.__version__,
        },
        "data": {
            "dir": str(data_dir),
            "files": sorted(
                str(p.relative_to(data_dir))
                for p in [
                    *Path(data_dir).glob("*.jsonl"),
                    *Path(data_dir).glob("real_threads/*.jsonl"),
                    *Path(data_dir).glob("real_logs/*.jsonl"),
                ]
            ),
            "raw_by_origin": dict(sorted(Counter(e.origin for e in raw).items())),
            "examples_by_origin": dict(sorted(Counter(e.origin for e in examples).items())),
            "ood_by_origin": dict(sorted(Counter(e.origin for e in ood_raw).items())),
            "max_generated_per_family": cfg.get("max_generated_per_family"),
            "threads": len({e.family for e in examples if e.origin == ORIGIN_THREAD}),
            "labelled_raw": len(raw),
            "examples": len(examples),
            "groups": int(len(set(groups.tolist()))),
            "families": len({e.family for e in examples}),
            "ood_texts": len(ood_fields),
            "feedback": str(feedback) if feedback else None,
            "per_class": dict(sorted(counts.items())),
            "families_per_class": {
                c: len({e.family for e in examples if e.category == c}) for c in classes
            },
        },
        "threshold_selection": cv.selection,
        "scores": scores,
        "predict_latency_ms": round(latency_ms, 3),
        "training_seconds": round(progress.elapsed(), 1),
    }
    (out_dir / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    (out_dir / CARD_NAME).write_text(model_card(manifest), encoding="utf-8")
    if out_dir.resolve() == MODELS_DIR:  # the shipped model: pin its digests in the package
        write_pin(out_dir)
    progress(
        f"wrote {artifact} ({len(data) / 1e6:.1f} MB), manifest and model card; "
        f"predict {latency_ms:.2f} ms/event"
    )
    return manifest
