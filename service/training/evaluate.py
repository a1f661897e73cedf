"""``vllm-sentinel evaluate DIR``: score the whole classifier on labelled whole logs.

A case is ``<id>.log`` plus ``<id>.json`` (``{"tier","category","stage",...}``), or a
``labels.jsonl`` with ``{"file": "<id>.log", "tier", "category", "stage"}`` lines.
Modes: ``signatures`` (no model), ``model`` (no signatures), ``hybrid`` (the product).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.classify.engine import Classifier
from service.classify.loader import load_text_model
from service.classify.rulebook import RuleBook
from service.offline.report import classify_records
from service.sources.files import read_file

MODES = ("signatures", "model", "hybrid")
STOPPED = "stopped"  # the verdict on a log that ends mid-start-up (docs/taxonomy.md)


@dataclass
class Case:
    id: str
    path: Path
    tier: str
    category: str
    stage: str | None


def load_cases(directory: Path) -> list[Case]:
    cases: list[Case] = []
    labels = directory / "labels.jsonl"
    if labels.is_file():
        for line in labels.read_text(encoding="utf-8").splitlines():
            if line.strip():
                d = json.loads(line)
                p = directory / d["file"]
                cases.append(Case(p.stem, p, d["tier"], d["category"], d.get("stage")))
    for side in sorted(directory.glob("*.json")):
        log = side.with_suffix(".log")
        if log.is_file():
            d = json.loads(side.read_text(encoding="utf-8"))
            cases.append(Case(side.stem, log, d["tier"], d["category"], d.get("stage")))
    return cases


def predict(case: Case, clf: Classifier) -> dict[str, Any]:
    reports = classify_records(read_file(str(case.path), stream=case.id), clf)
    rep = reports[0] if reports else None
    crit = [i for i in rep["incidents"] if i["severity"] == "critical"] if rep else []
    if crit:
        p = crit[0]
        return {
            "tier": p["tier"],
            "category": p["category"],
            "stage": p["stage"],
            "line": p["line"],
            "rule": p["rule"],
            "method": p["method"],
        }
    # a log that ends mid-start-up is never the healthy verdict: its own, "stopped" (no
    # failure line, so no tier; offline nothing pages - in the service it is the stall)
    stopped = rep is not None and rep["stopped"] is not None
    return {
        "tier": "none",
        "category": STOPPED if stopped else "healthy",
        "stage": rep["stage"] if rep else None,
        "line": "",
        "rule": None,
        "method": None,
    }


def macro_f1(y_true: list[str], y_pred: list[str], labels: list[str]) -> float:
    """Mean over ``labels`` of each label's F1 = 2·TP / (2·TP + FP + FN), 0 for a label that
    is neither expected nor predicted (scikit-learn's ``f1_score(..., average="macro",
    zero_division=0)``, without needing the [train] extra at run time)."""
    if not labels:
        return 0.0
    total = 0.0
    for label in labels:
        tp = sum(t == label and p == label for t, p in zip(y_true, y_pred, strict=True))
        fp = sum(t != label and p == label for t, p in zip(y_true, y_pred, strict=True))
        fn = sum(t == label and p != label for t, p in zip(y_true, y_pred, strict=True))
        total += 2 * tp / (2 * tp + fp + fn) if tp or fp or fn else 0.0
    return total / len(labels)


def score(cases: list[Case], preds: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(cases)
    tier_ok = sum(c.tier == p["tier"] for c, p in zip(cases, preds, strict=True))
    staged = [(c, p) for c, p in zip(cases, preds, strict=True) if c.stage]
    stage_ok = sum(c.stage == p["stage"] for c, p in staged)
    y_true = [c.category for c in cases]
    y_pred = [p["category"] for p in preds]
    labels = sorted(set(y_true))
    missed = [  # a failure that pages nothing (healthy, or a log that ends mid-start-up)
        c.id
        for c, p in zip(cases, preds, strict=True)
        if c.category != "healthy" and p["category"] in ("healthy", STOPPED)
    ]
    false_alarms = [  # a page on a healthy log (a log that ends mid-start-up pages nothing)
        c.id
        for c, p in zip(cases, preds, strict=True)
        if c.category == "healthy" and p["category"] not in ("healthy", STOPPED)
    ]
    stopped = [  # ended mid-start-up: neither healthy nor a page, whatever the label
        c.id for c, p in zip(cases, preds, strict=True) if p["category"] == STOPPED
    ]
    wrong = [
        {
            "case": c.id,
            "expected": f"{c.tier}/{c.category}@{c.stage}",
            "got": f"{p['tier']}/{p['category']}@{p['stage']}",
            "line": p["line"][:200],
        }
        for c, p in zip(cases, preds, strict=True)
        if (c.category, c.tier) != (p["category"], p["tier"]) or (c.stage and c.stage != p["stage"])
    ]
    return {
        "cases": n,
        "tier_accuracy": round(tier_ok / n, 4) if n else 0.0,
        "category_macro_f1": round(macro_f1(y_true, y_pred, labels), 4),
        "stage_accuracy": round(stage_ok / len(staged), 4) if staged else 0.0,
        "missed_failures": missed,
        "false_alarms": false_alarms,
        "stopped": stopped,
        "wrong": wrong,
    }


def evaluate(directory: Path, mode: str) -> dict[str, Any]:
    cases = load_cases(directory)
    rules = RuleBook(with_signatures=mode != "model")
    model = load_text_model(strict=True) if mode in ("model", "hybrid") else None
    preds = []
    for case in cases:
        clf = Classifier(rules, text_model=model)
        preds.append(predict(case, clf))
    return score(cases, preds)


def ablation(directory: Path) -> dict[str, Any]:
    """Unseen wording, simulated: for every failure case the signatures get right, remove the
    signature that decided it and classify again, signatures only vs hybrid. Measures what the
    text model adds when a message's wording is one no rule knows."""
    cases = [c for c in load_cases(directory) if c.category != "healthy"]
    model = load_text_model(strict=True)
    full = RuleBook()
    by_rule: dict[str, list[Case]] = {}
    for case in cases:
        got = predict(case, Classifier(full))
        if got["rule"] and (got["tier"], got["category"]) == (case.tier, case.category):
            by_rule.setdefault(got["rule"], []).append(case)
    sig_ok = hyb_ok = tier_sig = tier_hyb = n = 0
    for rule, group in by_rule.items():
        rb = RuleBook(exclude=frozenset({rule}))
        for case in group:
            n += 1
            s = predict(case, Classifier(rb))
            h = predict(case, Classifier(rb, text_model=model))
            sig_ok += s["category"] == case.category
            hyb_ok += h["category"] == case.category
            tier_sig += s["tier"] == case.tier
            tier_hyb += h["tier"] == case.tier
    return {
        "cases": n,
        "rules_removed": len(by_rule),
        "signatures_category_accuracy": round(sig_ok / n, 4) if n else 0.0,
        "hybrid_category_accuracy": round(hyb_ok / n, 4) if n else 0.0,
        "signatures_tier_accuracy": round(tier_sig / n, 4) if n else 0.0,
        "hybrid_tier_accuracy": round(tier_hyb / n, 4) if n else 0.0,
    }
