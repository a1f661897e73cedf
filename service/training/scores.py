"""Scoring predictions with abstention: labels, macro-F1, healthy false alarms, a report.

A prediction below its class's threshold (the global floor, raised per class) is
``unknown``: an abstention, counted as an error. ``healthy`` predicted for a failure
is a miss; a failure predicted for a healthy line is a false alarm.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from service.incidents.codec import JsonObject

from .examples import UNKNOWN

__all__ = ["HEALTHY", "healthy_false_alarms", "macro_f1", "report", "with_abstain"]

HEALTHY = "healthy"


def with_abstain(
    classes: Sequence[str],
    proba: np.ndarray,
    threshold: float,
    class_thresholds: dict[str, float] | None = None,
) -> list[str]:
    """The top class of each row of ``proba``, or ``unknown`` below its threshold."""
    best = proba.argmax(axis=1)
    out = []
    for i, b in enumerate(best):
        c = classes[b]
        t = max(threshold, (class_thresholds or {}).get(c, 0.0))
        out.append(c if proba[i, b] >= t else UNKNOWN)
    return out


def macro_f1(y_true: Sequence[str], y_pred: Sequence[str], labels: Sequence[str]) -> float:
    """scikit-learn's macro-F1 over ``labels`` (0 for a label neither true nor predicted)."""
    from sklearn.metrics import f1_score

    return float(f1_score(y_true, y_pred, labels=list(labels), average="macro", zero_division=0))


def healthy_false_alarms(y_true: Sequence[str], y_pred: Sequence[str]) -> int:
    """Healthy lines predicted as a failure (abstaining on them is no alarm)."""
    return sum(
        1
        for t, p in zip(y_true, y_pred, strict=True)
        if t == HEALTHY and p not in (HEALTHY, UNKNOWN)
    )


def report(
    classes: Sequence[str],
    y_true: Sequence[str],
    proba: np.ndarray,
    threshold: float,
    ood_proba: np.ndarray | None,
    class_thresholds: dict[str, float] | None = None,
    pred: list[str] | None = None,
) -> JsonObject:
    """Scores of ``proba`` against ``y_true`` with abstention (``pred``: labels already
    decided) and without it (argmax): macro-F1, accuracy, abstain rate, healthy false
    alarms, per-class precision/recall/F1, the confusion matrix (last column: abstained),
    and the share of out-of-taxonomy text refused when ``ood_proba`` is given."""
    from sklearn.metrics import confusion_matrix, precision_recall_fscore_support

    labels = list(classes)
    argmax = [classes[b] for b in proba.argmax(axis=1)]
    if pred is None:
        pred = with_abstain(classes, proba, threshold, class_thresholds)
    p, r, f, s = precision_recall_fscore_support(y_true, pred, labels=labels, zero_division=0)
    pa, ra, fa_, _ = precision_recall_fscore_support(y_true, argmax, labels=labels, zero_division=0)
    per_class = {
        c: {
            "precision": round(float(p[i]), 4),
            "recall": round(float(r[i]), 4),
            "f1": round(float(f[i]), 4),
            "f1_no_abstain": round(float(fa_[i]), 4),
            "support": int(s[i]),
        }
        for i, c in enumerate(labels)
    }
    cm_labels = labels + [UNKNOWN]
    cm = confusion_matrix(y_true, pred, labels=cm_labels)
    out = {
        "n_test": len(y_true),
        "macro_f1": round(macro_f1(y_true, pred, labels), 4),
        "macro_f1_no_abstain": round(macro_f1(y_true, argmax, labels), 4),
        "accuracy": round(float(np.mean([a == b for a, b in zip(y_true, pred, strict=True)])), 4),
        "abstain_rate": round(sum(x == UNKNOWN for x in pred) / max(1, len(pred)), 4),
        "healthy_false_alarms": healthy_false_alarms(y_true, pred),
        "healthy_false_alarms_no_abstain": healthy_false_alarms(y_true, argmax),
        "per_class": per_class,
        "confusion_labels": cm_labels,
        "confusion": cm[: len(labels)].tolist(),
    }
    if ood_proba is not None and len(ood_proba):
        ood_pred = with_abstain(classes, ood_proba, threshold, class_thresholds)
        out["ood_refused"] = round(float(np.mean([p == UNKNOWN for p in ood_pred])), 4)
        out["n_ood"] = len(ood_proba)
    return out
