"""Abstain thresholds, chosen on out-of-fold (validation) probabilities.

Per class, high enough that (almost) no validation healthy line and most out-of-taxonomy
text is refused; then a global floor for the best macro-F1. The held-out scores of
:mod:`service.training.crossval` use thresholds chosen on the *other* folds only
(cross-fitting); the shipped thresholds use every fold.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from service.incidents.codec import JsonObject

from .examples import UNKNOWN
from .scores import HEALTHY, healthy_false_alarms, macro_f1, with_abstain

__all__ = ["choose_thresholds"]

THRESHOLD_GRID = tuple(round(float(x), 2) for x in np.arange(0.20, 0.991, 0.01))
# validation healthy lines allowed above the threshold (label noise in ~2k benign lines)
MAX_HEALTHY_FALSE_ALARM_RATE = 0.002
# share of out-of-taxonomy validation texts landing on a class that its threshold refuses
OOD_REFUSE = 0.5
# weight of out-of-taxonomy refusal against macro-F1 when choosing the global floor
OOD_BONUS = 0.05
# "healthy" silences an error-looking event: unfamiliar error text must not land there
OOD_REFUSE_HEALTHY = 1.0


def choose_thresholds(
    classes: Sequence[str],
    proba: np.ndarray,
    y_true: Sequence[str],
    ood_proba: np.ndarray | None,
    asked: np.ndarray | None = None,
) -> tuple[float, dict[str, float], JsonObject]:
    """Abstain thresholds from out-of-fold (validation) probabilities.

    Per failure class ``c``: the lowest threshold at which no validation healthy line
    whose top class is ``c`` reaches it (at most ``MAX_HEALTHY_FALSE_ALARM_RATE`` of the
    healthy lines over all classes), so a class that benign lines resemble needs more
    confidence, and (``OOD_REFUSE``, ``OOD_REFUSE_HEALTHY``) so that most out-of-taxonomy
    text landing on the class is refused. Then a global floor (applies to every class,
    ``healthy`` included): the best validation macro-F1 (abstentions count as errors) plus
    ``OOD_BONUS`` x the share of out-of-taxonomy text refused; the lowest on ties.

    ``asked`` marks the healthy lines the classifier would ask the model about (error-looking,
    :func:`service.classify.findings.error_like`); only those raise a class's threshold, since
    a benign INFO line never reaches the model."""
    y = list(y_true)
    best = proba.argmax(axis=1)
    top = proba[np.arange(len(best)), best]
    if asked is None:
        asked = np.ones(len(y), dtype=bool)
    n_healthy = sum(1 for i, t in enumerate(y) if t == HEALTHY and asked[i])
    allowed = int(n_healthy * MAX_HEALTHY_FALSE_ALARM_RATE)
    # healthy lines mistaken for each class, most confident first
    wrong: list[tuple[float, str]] = sorted(
        (
            (float(top[i]), classes[b])
            for i, b in enumerate(best)
            if y[i] == HEALTHY and classes[b] != HEALTHY and asked[i]
        ),
        reverse=True,
    )
    # tolerate the `allowed` least costly ones: drop from the top only where needed
    class_thr: dict[str, float] = {}
    for p_, c in wrong[allowed:] if allowed else wrong:
        class_thr[c] = max(class_thr.get(c, 0.0), min(0.999, p_ + 0.005))
    # out-of-taxonomy text: per class, refuse at least OOD_REFUSE of what lands there
    if ood_proba is not None and len(ood_proba):
        ob = ood_proba.argmax(axis=1)
        for k, c in enumerate(classes):
            tops = np.sort(ood_proba[ob == k, k])
            if len(tops):
                share = OOD_REFUSE_HEALTHY if c == HEALTHY else OOD_REFUSE
                q = float(np.quantile(tops, share, method="higher"))
                class_thr[c] = max(class_thr.get(c, 0.0), min(0.999, q + 0.005))
    table = []
    for t in THRESHOLD_GRID:
        pred = with_abstain(classes, proba, t, class_thr)
        f1 = macro_f1(y, pred, classes)
        fa = healthy_false_alarms(y, pred)
        ood_refused = 1.0
        if ood_proba is not None and len(ood_proba):
            ob = ood_proba.argmax(axis=1)
            ood_refused = float(
                np.mean(
                    [
                        ood_proba[i, b] < max(t, class_thr.get(classes[b], 0.0))
                        for i, b in enumerate(ob)
                    ]
                )
            )
        abstain = sum(p == UNKNOWN for p in pred) / max(1, len(pred))
        table.append((float(t), f1, fa, ood_refused, abstain))
    chosen = max(table, key=lambda r: (round(r[1] + OOD_BONUS * r[3], 4), -r[0]))
    info = {
        "threshold": chosen[0],
        "class_thresholds": {c: round(v, 3) for c, v in sorted(class_thr.items())},
        "validation_macro_f1_with_abstain": round(chosen[1], 4),
        "validation_healthy_false_alarms": int(chosen[2]),
        "validation_ood_refused": round(chosen[3], 4),
        "validation_abstain_rate": round(chosen[4], 4),
    }
    return chosen[0], {c: round(v, 3) for c, v in class_thr.items()}, info
