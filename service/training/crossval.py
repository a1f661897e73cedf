"""Grouped cross-validation: held-out scores on wordings never seen in training, and the
abstain thresholds the shipped model uses.

Class-stratified k-fold over leakage-free groups (``StratifiedGroupKFold``: whole template
families, never random lines): every example is predicted by a model that never saw its
family. The held-out labels of fold k use thresholds chosen on the other folds only
(cross-fitting), so the reported scores never saw their own labels; the shipped
thresholds are chosen on every fold's out-of-fold probabilities. Real thread lines have
their thread as family, so no thread is ever on both sides; their held-out scores are also
reported on their own (``scores["real_threads"]``), apart from generated and seed text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from service.classify.model_input import Fields

from .examples import UNKNOWN
from .recipe import as_matrix, fit_pipeline, group_splits
from .scores import report, with_abstain
from .thresholds import choose_thresholds

__all__ = ["CrossValidation", "cross_validate"]


@dataclass(slots=True)
class CrossValidation:
    """What cross-validation decided: held-out ``scores`` (the manifest's and the card's),
    the shipped abstain ``threshold`` and ``class_thresholds``, and how they were chosen
    (``selection``: the validation scores at the chosen floor)."""

    classes: list[str]
    scores: dict[str, Any]
    threshold: float
    class_thresholds: dict[str, float]
    selection: dict[str, Any]


def cross_validate(
    config: dict[str, Any],
    seed: int,
    texts: Sequence[Fields],
    y: np.ndarray,
    groups: np.ndarray,
    ood_fields: Sequence[Fields],
    progress: Callable[[str], None],
    real: np.ndarray | None = None,
    asked: np.ndarray | None = None,
) -> CrossValidation:
    """Cross-validate the recipe on ``texts`` (labels ``y``, groups ``groups``);
    ``ood_fields`` (out-of-taxonomy texts) only raise the thresholds; ``real`` marks the
    real thread lines, scored on their own too; ``asked`` the error-looking lines, the only
    healthy ones that raise a class's threshold."""
    classes = sorted(set(y.tolist()))
    splits = group_splits(y, groups, config["test_folds"], seed)
    oof = np.zeros((len(texts), len(classes)))
    fold_of = np.zeros(len(texts), dtype=int)
    ood_by_fold: list[np.ndarray] = []
    for k, (a, b) in enumerate(splits):
        progress(
            f"fold {k + 1}/{len(splits)}: fit {len(a)}, hold out {len(b)} "
            f"({len(set(groups[b].tolist()))} families)"
        )
        pipe = fit_pipeline(config, seed, [texts[i] for i in a], y[a], groups[a])
        cols = [classes.index(c) for c in pipe.classes_]
        oof[np.ix_(b, np.asarray(cols))] = pipe.predict_proba(as_matrix([texts[i] for i in b]))
        fold_of[b] = k
        po = np.zeros((len(ood_fields), len(classes)))
        if ood_fields:
            po[:, cols] = pipe.predict_proba(as_matrix(ood_fields))
        ood_by_fold.append(po)
    # thresholds for fold k are chosen on the other folds only (cross-fitting), so the
    # held-out scores never saw their own labels; the shipped thresholds use every fold
    pred_labels: list[str] = [""] * len(texts)
    ood_refused = []
    for k in range(len(splits)):
        other = fold_of != k
        ood_o = np.mean([ood_by_fold[j] for j in range(len(splits)) if j != k], axis=0)
        t_k, ct_k, _ = choose_thresholds(
            classes,
            oof[other],
            y[other].tolist(),
            ood_o if ood_fields else None,
            None if asked is None else asked[other],
        )
        t_k = max(t_k, float(config.get("min_threshold", 0.0)))
        idx = np.where(fold_of == k)[0]
        for i, lab in zip(idx, with_abstain(classes, oof[idx], t_k, ct_k), strict=True):
            pred_labels[i] = lab
        if ood_fields:
            ood_pred = with_abstain(classes, ood_by_fold[k], t_k, ct_k)
            ood_refused.append(float(np.mean([p == UNKNOWN for p in ood_pred])))
    scores = report(classes, y.tolist(), oof, 0.0, None, None, pred=pred_labels)
    if ood_fields:
        scores["ood_refused"] = round(float(np.mean(ood_refused)), 4)
        scores["n_ood"] = len(ood_fields)
    scores["folds"] = len(splits)
    if real is not None and real.any():
        idx = np.where(real)[0]
        scores["real_threads"] = report(
            classes,
            y[idx].tolist(),
            oof[idx],
            0.0,
            None,
            None,
            pred=[pred_labels[i] for i in idx],
        )
    ood_all = np.mean(ood_by_fold, axis=0) if ood_fields else None
    threshold, class_thr, selection = choose_thresholds(classes, oof, y.tolist(), ood_all, asked)
    threshold = max(threshold, float(config.get("min_threshold", 0.0)))
    return CrossValidation(classes, scores, threshold, class_thr, selection)
