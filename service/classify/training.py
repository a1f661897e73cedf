"""Train, evaluate and save the text classifier.

    python -m service.classify.training --data training_data --out models [--seed 0]
           [--with-feedback corrections.jsonl]

Steps (each reported on stderr):

1. Load ``<data>/*.jsonl`` (one example a line: text, category, tier, source, family);
   files named ``ood*.jsonl`` hold out-of-taxonomy error text (no class of its own) used
   only to choose the abstain thresholds. Corrections (``--with-feedback``, JSONL of
   ``{text, category}``) are added as examples of their own family; a correction to
   ``unknown`` becomes out-of-taxonomy text.
2. Split every event into its key line and its whole text, mask both
   (:func:`service.classify.text_model.event_fields`), drop exact duplicates of a masked
   text, cap examples per family, and put families whose masked texts coincide into one
   group (union-find), so no wording is ever on both sides of a split.
3. Grouped, class-stratified k-fold cross-validation (``StratifiedGroupKFold``: whole
   template families, never random lines): every example is predicted by a model that
   never saw its family.
4. Abstain thresholds from those out-of-fold probabilities: per class, high enough that
   (almost) no validation healthy line and most out-of-taxonomy text is refused; then a
   global floor for the best macro-F1. The reported held-out scores use thresholds
   chosen on the *other* folds only (cross-fitting).
5. Refit the recipe on all the data, export it to plain arrays (``text_model.npz``), check
   that the export reproduces the scikit-learn pipeline exactly, and write the manifest
   (``text_model.json``: SHA-256, classes, thresholds, versions, counts, scores) and a
   generated ``MODEL_CARD.md``.

Same data + same seed -> same splits, thresholds, scores and artifact bytes.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..taxonomy import CATEGORY_TIER
from .masking import mask
from .text_model import (
    MANIFEST_FORMAT,
    ArtifactError,
    LinearTextScorer,
    TextModel,
    as_matrix,
    dumps_artifact,
    event_fields,
    loads_artifact,
    sha256_bytes,
)

__all__ = ["train", "main", "load_examples", "build_pipeline", "Example", "MODEL_CONFIG"]

ARTIFACT_NAME = "text_model.npz"
MANIFEST_NAME = "text_model.json"
CARD_NAME = "MODEL_CARD.md"

# The recipe. Chosen by group-held-out comparison (see training_data/README.md).
MODEL_CONFIG: dict[str, Any] = {
    "word_ngrams": (1, 2),
    "char_ngrams": (2, 5),
    "char_analyzer": "char_wb",
    "max_features_word": 30000,
    "max_features_char": 60000,
    "context_ngrams": (1, 2),
    "max_features_context": 20000,
    "context_weight": 1.0,
    "min_df": 1,
    "classifier": "linearsvc",
    "C": 0.25,
    "calibration": "sigmoid",
    "calibration_folds": 5,
    "test_folds": 5,
    "max_per_family": 60,
}

THRESHOLD_GRID = tuple(round(float(x), 2) for x in np.arange(0.20, 0.991, 0.01))
HEALTHY = "healthy"
# validation healthy lines allowed above the threshold (label noise in ~2k benign lines)
MAX_HEALTHY_FALSE_ALARM_RATE = 0.002
# share of out-of-taxonomy validation texts landing on a class that its threshold refuses
OOD_REFUSE = 0.5
# weight of out-of-taxonomy refusal against macro-F1 when choosing the global floor
OOD_BONUS = 0.05
# "healthy" silences an error-looking event: unfamiliar error text must not land there
OOD_REFUSE_HEALTHY = 1.0
UNKNOWN = "unknown"


@dataclass(slots=True)
class Example:
    text: str
    category: str
    family: str
    source: str = ""
    stage: str | None = None
    masked: str = ""
    key: str = ""
    group: int = -1
    extra: dict[str, Any] = field(default_factory=dict)


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


# --- data ------------------------------------------------------------------------------------


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise ValueError(f"{path}:{n}: not JSON: {exc}") from exc
            if not isinstance(row, dict) or not isinstance(row.get("text"), str):
                raise ValueError(f"{path}:{n}: an example needs a string 'text'")
            row["_where"] = f"{path.name}:{n}"
            rows.append(row)
    return rows


def load_examples(
    data_dir: Path, feedback: Path | None = None
) -> tuple[list[Example], list[Example]]:
    """(labelled examples, out-of-taxonomy texts) from ``data_dir`` (+ corrections)."""
    data_dir = Path(data_dir)
    held_out = {"corpus", "blind"}  # tests/corpus and tests/blind: evaluation only
    parts = data_dir.resolve().parts
    if any(a == "tests" and b in held_out for a, b in zip(parts, parts[1:], strict=False)):
        raise ValueError(f"{data_dir} is a held-out evaluation set, never training data")
    files = sorted(data_dir.glob("*.jsonl"))
    if not files:
        raise FileNotFoundError(f"no *.jsonl training files in {data_dir}")
    examples: list[Example] = []
    ood: list[Example] = []
    for path in files:
        is_ood = path.name.startswith("ood")
        for row in _read_jsonl(path):
            cat = row.get("category")
            fam = str(row.get("family") or f"{path.stem}:{row['_where']}")
            if is_ood or cat == UNKNOWN:
                ood.append(Example(row["text"], UNKNOWN, fam, str(row.get("source", ""))))
                continue
            if cat not in CATEGORY_TIER:
                raise ValueError(f"{row['_where']}: category {cat!r} is not in the taxonomy")
            tier = row.get("tier")
            if tier is not None and tier != CATEGORY_TIER[cat]:
                raise ValueError(
                    f"{row['_where']}: tier {tier!r} does not match {cat!r} "
                    f"({CATEGORY_TIER[cat]!r})"
                )
            examples.append(
                Example(row["text"], cat, fam, str(row.get("source", "")), row.get("stage"))
            )
    if feedback is not None:
        for i, row in enumerate(_read_jsonl(Path(feedback))):
            cat = row.get("category")
            fam = f"feedback:{i}"
            if cat == UNKNOWN:
                ood.append(Example(row["text"], UNKNOWN, fam, "feedback"))
            elif cat in CATEGORY_TIER:
                examples.append(Example(row["text"], cat, fam, "feedback"))
            else:
                raise ValueError(f"feedback {row['_where']}: unknown category {cat!r}")
    return examples, ood


def _prepare(examples: list[Example], max_per_family: int, seed: int) -> list[Example]:
    """Mask, drop duplicate masked texts, cap examples per family, assign leakage-free groups."""
    for ex in examples:
        ex.key, ex.masked = event_fields(ex.text)
    seen: dict[str, Example] = {}
    kept: list[Example] = []
    conflicts = 0
    # union-find over family ids, joined whenever two families share a masked text
    parent: dict[str, str] = {}

    def find(a: str) -> str:
        parent.setdefault(a, a)
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    def union(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    for ex in examples:
        if not ex.masked.strip():
            continue
        find(ex.family)
        prev = seen.get(ex.masked)
        if prev is None:
            seen[ex.masked] = ex
            kept.append(ex)
        else:
            union(prev.family, ex.family)
            if prev.category != ex.category:
                conflicts += 1
    if conflicts:
        # the same masked text under two labels: keep the first, the data file order decides
        print(f"[train] warning: {conflicts} masked texts carry two labels", file=sys.stderr)
    rng = np.random.default_rng(seed)
    by_family: dict[str, list[Example]] = defaultdict(list)
    for ex in kept:
        by_family[ex.family].append(ex)
    capped: list[Example] = []
    for fam in sorted(by_family):
        items = by_family[fam]
        if len(items) > max_per_family:
            idx = sorted(rng.choice(len(items), size=max_per_family, replace=False))
            items = [items[i] for i in idx]
        capped.extend(items)
    roots = sorted({find(ex.family) for ex in capped})
    gid = {r: i for i, r in enumerate(roots)}
    for ex in capped:
        ex.group = gid[find(ex.family)]
    return capped


# --- model -----------------------------------------------------------------------------------


def _oov_tfidf_class() -> type:
    from sklearn.feature_extraction.text import TfidfVectorizer

    class OovAwareTfidf(TfidfVectorizer):
        """TF-IDF whose L2 norm also counts the terms it does not know.

        A plain TfidfVectorizer drops unknown terms before normalising, so a text made of
        unfamiliar words keeps full weight on its few familiar ones ("ERROR: the flux
        capacitor overheated" becomes mostly "error") and the classifier is confidently
        wrong. Here every unknown term adds (tf x the largest idf)^2 to the norm: unfamiliar
        text gets small feature values, a decision near the intercepts, and the model
        abstains. Construct with ``norm=None``; the normalisation is done here."""

        def fit_transform(self, raw_documents, y=None):
            docs = list(raw_documents)
            return self._oov_normalise(super().fit_transform(docs, y), docs)

        def transform(self, raw_documents):
            docs = list(raw_documents)
            return self._oov_normalise(super().transform(docs), docs)

        def _oov_normalise(self, X, docs):
            import scipy.sparse as sp

            analyze = self.build_analyzer()
            vocab = self.vocabulary_
            oov_idf = float(self.idf_.max())
            X = sp.csr_matrix(X, dtype=np.float64)
            sq = np.asarray(X.multiply(X).sum(axis=1)).ravel()
            for i, doc in enumerate(docs):
                counts: dict[str, int] = {}
                for term in analyze(doc):
                    if term not in vocab:
                        counts[term] = counts.get(term, 0) + 1
                if counts:
                    tf = np.array(list(counts.values()), dtype=np.float64)
                    if self.sublinear_tf:
                        tf = np.log(tf) + 1.0
                    sq[i] += float(np.dot(tf, tf)) * oov_idf * oov_idf
            norms = np.sqrt(sq)
            norms[norms == 0] = 1.0
            return sp.diags(1.0 / norms) @ X

    return OovAwareTfidf


def build_pipeline(config: dict[str, Any], seed: int, cv: Any = None) -> Any:
    """Features: TF-IDF word and character n-grams of the event's key line (column 0) and
    word n-grams of the whole masked event (column 1, the context: frames, stage lines);
    then a linear classifier with calibrated probabilities."""
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.compose import ColumnTransformer
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.svm import LinearSVC

    if config.get("oov_norm", True):
        TfidfVectorizer = _oov_tfidf_class()  # noqa: N806
        norm = None
    else:
        norm = "l2"
    token_pattern = r"(?u)<[A-Z]+>|\b\w[\w.]*\w\b|\b\w\b"
    word = TfidfVectorizer(
        analyzer="word",
        ngram_range=tuple(config["word_ngrams"]),
        token_pattern=token_pattern,
        lowercase=True,
        sublinear_tf=True,
        min_df=config["min_df"],
        max_features=config["max_features_word"],
        norm=norm,
        dtype=np.float64,
    )
    char = TfidfVectorizer(
        analyzer=config["char_analyzer"],
        ngram_range=tuple(config["char_ngrams"]),
        lowercase=True,
        sublinear_tf=True,
        min_df=config["min_df"],
        max_features=config["max_features_char"],
        norm=norm,
        dtype=np.float64,
    )
    context = TfidfVectorizer(
        analyzer="word",
        ngram_range=tuple(config["context_ngrams"]),
        token_pattern=token_pattern,
        lowercase=True,
        sublinear_tf=True,
        min_df=config["min_df"],
        max_features=config["max_features_context"],
        norm=norm,
        dtype=np.float64,
    )
    col = 1 if config.get("char_on_whole") else 0
    transformers = [("key_word", word, col), ("key_char", char, col)]
    kw = float(config.get("key_weight", 1.0))
    weights = {"key_word": kw, "key_char": kw}
    if config["context_weight"] > 0:
        transformers.append(("context", context, 1))
        weights["context"] = float(config["context_weight"])
    features = ColumnTransformer(transformers, transformer_weights=weights)
    kind = config["classifier"]
    if kind == "linearsvc":
        base = LinearSVC(C=config["C"], class_weight="balanced", random_state=seed)
        clf = CalibratedClassifierCV(
            base,
            method=config["calibration"],
            cv=cv if cv is not None else config["calibration_folds"],
            ensemble=False,
        )
    elif kind == "logreg":
        clf = LogisticRegression(
            C=config["C"], class_weight="balanced", max_iter=3000, random_state=seed
        )
    else:
        raise ValueError(f"unknown classifier {kind!r}")
    return Pipeline([("features", features), ("clf", clf)])


def _group_splits(y: np.ndarray, groups: np.ndarray, n: int, seed: int) -> list[tuple]:
    from sklearn.model_selection import StratifiedGroupKFold

    n = max(2, min(n, len(set(groups.tolist()))))
    skf = StratifiedGroupKFold(n_splits=n, shuffle=True, random_state=seed)
    return list(skf.split(np.zeros(len(y)), y, groups))


def _fit(
    config: dict[str, Any],
    seed: int,
    fields: list[tuple[str, str]],
    y: np.ndarray,
    groups: np.ndarray,
) -> Any:
    cv = None
    if config["classifier"] == "linearsvc":
        cv = _group_splits(y, groups, config["calibration_folds"], seed + 1)
    pipe = build_pipeline(config, seed, cv=cv)
    pipe.fit(as_matrix(fields), y)
    # TfidfVectorizer keeps every term pruned by max_features in ``stop_words_``: only
    # needed for introspection, and by far the largest part of a saved artifact.
    for _, vec, _ in pipe.named_steps["features"].transformers_:
        if hasattr(vec, "stop_words_"):
            delattr(vec, "stop_words_")
    return pipe


# --- metrics ---------------------------------------------------------------------------------


def _with_abstain(
    classes: Sequence[str],
    proba: np.ndarray,
    threshold: float,
    class_thresholds: dict[str, float] | None = None,
) -> list[str]:
    best = proba.argmax(axis=1)
    out = []
    for i, b in enumerate(best):
        c = classes[b]
        t = max(threshold, (class_thresholds or {}).get(c, 0.0))
        out.append(c if proba[i, b] >= t else UNKNOWN)
    return out


def _macro_f1(y_true: Sequence[str], y_pred: Sequence[str], labels: Sequence[str]) -> float:
    from sklearn.metrics import f1_score

    return float(f1_score(y_true, y_pred, labels=list(labels), average="macro", zero_division=0))


def _healthy_false_alarms(y_true: Sequence[str], y_pred: Sequence[str]) -> int:
    return sum(
        1
        for t, p in zip(y_true, y_pred, strict=True)
        if t == HEALTHY and p not in (HEALTHY, UNKNOWN)
    )


def choose_thresholds(
    classes: Sequence[str],
    proba: np.ndarray,
    y_true: Sequence[str],
    ood_proba: np.ndarray | None,
) -> tuple[float, dict[str, float], dict[str, Any]]:
    """Abstain thresholds from out-of-fold (validation) probabilities.

    Per failure class ``c``: the lowest threshold at which no validation healthy line
    whose top class is ``c`` reaches it (at most ``MAX_HEALTHY_FALSE_ALARM_RATE`` of the
    healthy lines over all classes), so a class that benign lines resemble needs more
    confidence, and (``OOD_REFUSE``, ``OOD_REFUSE_HEALTHY``) so that most out-of-taxonomy
    text landing on the class is refused. Then a global floor (applies to every class,
    ``healthy`` included): the best validation macro-F1 (abstentions count as errors) plus
    ``OOD_BONUS`` x the share of out-of-taxonomy text refused; the lowest on ties."""
    y = list(y_true)
    best = proba.argmax(axis=1)
    top = proba[np.arange(len(best)), best]
    n_healthy = sum(1 for t in y if t == HEALTHY)
    allowed = int(n_healthy * MAX_HEALTHY_FALSE_ALARM_RATE)
    # healthy lines mistaken for each class, most confident first
    wrong: list[tuple[float, str]] = sorted(
        (
            (float(top[i]), classes[b])
            for i, b in enumerate(best)
            if y[i] == HEALTHY and classes[b] != HEALTHY
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
        pred = _with_abstain(classes, proba, t, class_thr)
        f1 = _macro_f1(y, pred, classes)
        fa = _healthy_false_alarms(y, pred)
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


def _report(
    classes: Sequence[str],
    y_true: Sequence[str],
    proba: np.ndarray,
    threshold: float,
    ood_proba: np.ndarray | None,
    class_thresholds: dict[str, float] | None = None,
    pred: list[str] | None = None,
) -> dict[str, Any]:
    from sklearn.metrics import confusion_matrix, precision_recall_fscore_support

    labels = list(classes)
    argmax = [classes[b] for b in proba.argmax(axis=1)]
    if pred is None:
        pred = _with_abstain(classes, proba, threshold, class_thresholds)
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
        "macro_f1": round(_macro_f1(y_true, pred, labels), 4),
        "macro_f1_no_abstain": round(_macro_f1(y_true, argmax, labels), 4),
        "accuracy": round(float(np.mean([a == b for a, b in zip(y_true, pred, strict=True)])), 4),
        "abstain_rate": round(sum(x == UNKNOWN for x in pred) / max(1, len(pred)), 4),
        "healthy_false_alarms": _healthy_false_alarms(y_true, pred),
        "healthy_false_alarms_no_abstain": _healthy_false_alarms(y_true, argmax),
        "per_class": per_class,
        "confusion_labels": cm_labels,
        "confusion": cm[: len(labels)].tolist(),
    }
    if ood_proba is not None and len(ood_proba):
        ood_pred = _with_abstain(classes, ood_proba, threshold, class_thresholds)
        out["ood_refused"] = round(float(np.mean([p == UNKNOWN for p in ood_pred])), 4)
        out["n_ood"] = len(ood_proba)
    return out


# --- main entry ------------------------------------------------------------------------------


def train(
    data_dir: Path,
    out_dir: Path,
    seed: int = 0,
    feedback: Path | None = None,
    *,
    config: dict[str, Any] | None = None,
    quiet: bool = False,
    max_examples: int | None = None,
) -> dict:
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
    examples = _prepare(raw, cfg["max_per_family"], seed)
    if max_examples is not None and len(examples) > max_examples:
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
        examples = sub
    known = {e.masked for e in examples}
    ood_fields = sorted({event_fields(e.text) for e in ood_raw if mask(e.text) not in known})
    texts = [(e.key, e.masked) for e in examples]
    y = np.array([e.category for e in examples])
    groups = np.array([e.group for e in examples])
    counts = Counter(y.tolist())
    progress(
        f"{len(examples)} distinct masked examples in {len(set(groups.tolist()))} groups, "
        f"{len(counts)} classes"
    )

    # 3.-5. grouped cross-validation: every template family is held out exactly once
    classes = sorted(counts)
    splits = _group_splits(y, groups, cfg["test_folds"], seed)
    oof = np.zeros((len(texts), len(classes)))
    fold_of = np.zeros(len(texts), dtype=int)
    ood_by_fold: list[np.ndarray] = []
    for k, (a, b) in enumerate(splits):
        progress(
            f"fold {k + 1}/{len(splits)}: fit {len(a)}, hold out {len(b)} "
            f"({len(set(groups[b].tolist()))} families)"
        )
        pipe = _fit(cfg, seed, [texts[i] for i in a], y[a], groups[a])
        cols = [classes.index(c) for c in pipe.classes_]
        oof[np.ix_(b, cols)] = pipe.predict_proba(as_matrix([texts[i] for i in b]))
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
            classes, oof[other], y[other].tolist(), ood_o if ood_fields else None
        )
        idx = np.where(fold_of == k)[0]
        for i, lab in zip(idx, _with_abstain(classes, oof[idx], t_k, ct_k), strict=True):
            pred_labels[i] = lab
        if ood_fields:
            ood_pred = _with_abstain(classes, ood_by_fold[k], t_k, ct_k)
            ood_refused.append(float(np.mean([p == UNKNOWN for p in ood_pred])))
    scores = _report(classes, y.tolist(), oof, 0.0, None, None, pred=pred_labels)
    if ood_fields:
        scores["ood_refused"] = round(float(np.mean(ood_refused)), 4)
        scores["n_ood"] = len(ood_fields)
    scores["folds"] = len(splits)
    ood_all = np.mean(ood_by_fold, axis=0) if ood_fields else None
    threshold, class_thr, thr_info = choose_thresholds(classes, oof, y.tolist(), ood_all)
    progress(f"abstain threshold {threshold:.2f}, per class {class_thr}")
    progress(
        f"held-out macro-F1 {scores['macro_f1']:.4f} (no abstain "
        f"{scores['macro_f1_no_abstain']:.4f}), abstain {scores['abstain_rate']:.3f}, "
        f"healthy false alarms {scores['healthy_false_alarms']}"
    )

    # 6. final model on all data
    progress("fitting the final model on all examples")
    final = _fit(cfg, seed, texts, y, groups)
    scorer = LinearTextScorer.from_pipeline(final)
    data = dumps_artifact(scorer)
    # the exported arrays must reproduce the pipeline exactly, or nothing is written
    check = [texts[i] for i in range(0, len(texts), max(1, len(texts) // 300))]
    ref = final.predict_proba(as_matrix(check))
    reloaded = loads_artifact(data)
    got = np.vstack([reloaded.proba(f) for f in check])
    if not np.allclose(ref, got, rtol=1e-6, atol=1e-9):
        raise ArtifactError("exported model does not reproduce the trained pipeline")
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
            "files": sorted(p.name for p in Path(data_dir).glob("*.jsonl")),
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
        "threshold_selection": thr_info,
        "scores": scores,
        "predict_latency_ms": round(latency_ms, 3),
        "training_seconds": round(progress.elapsed(), 1),
    }
    (out_dir / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    (out_dir / CARD_NAME).write_text(model_card(manifest), encoding="utf-8")
    from service.classify.loader import MODELS_DIR, write_pin

    if out_dir.resolve() == MODELS_DIR:  # the shipped model: pin its digests in the package
        write_pin(out_dir)
    progress(
        f"wrote {artifact} ({len(data) / 1e6:.1f} MB), manifest and model card; "
        f"predict {latency_ms:.2f} ms/event"
    )
    return manifest


def model_card(m: dict[str, Any]) -> str:
    s = m["scores"]
    d = m["data"]
    lines = [
        "# Text classifier model card",
        "",
        "Generated by `python -m service.classify.training`; do not edit by hand.",
        "",
        "## What it is",
        "",
        "Classifies one error-looking vLLM container log event (already stripped of the vLLM",
        "header and process prefix; an exception line, optionally with a few context lines)",
        "into a taxonomy category, for events no regex signature explains.",
        "",
        "- Input: the event is split into its *key line* (the exception / error line; frames,",
        "  source lines, cascade headers and torch's CUDA footer skipped) and the whole event;",
        "  both are masked (`service/classify/masking.py`: numbers, sizes, paths, hosts ...).",
        "- Features: TF-IDF word n-grams "
        f"{tuple(m['config']['word_ngrams'])} and character n-grams "
        f"{tuple(m['config']['char_ngrams'])} (`{m['config']['char_analyzer']}`) of the key line,",
        f"  word n-grams {tuple(m['config']['context_ngrams'])} of the whole event (weight "
        f"{m['config']['context_weight']}); the L2 norm also counts unknown terms, so",
        "  unfamiliar text gets small features and low confidence.",
        f"- Classifier: `{m['config']['classifier']}` (C={m['config']['C']}, balanced class "
        "weights)"
        + (
            f", {m['config']['calibration']} calibration on group folds."
            if m["config"]["classifier"] == "linearsvc"
            else ", multinomial probabilities."
        ),
        f"- Abstain: below a floor of **{m['threshold']:.2f}** on the top calibrated probability,",
        "  raised per class where validation showed benign or out-of-taxonomy lines",
        "  resembling the class, it answers `unknown` / tier `other` with the masked template.",
        "",
        "## Data",
        "",
        f"{d['labelled_raw']} labelled lines from `{d['dir']}` ({', '.join(d['files'])}),",
        f"{d['examples']} distinct after masking and the per-family cap, in {d['families']}",
        f"template families ({d['groups']} leakage-free groups); {d['ood_texts']}",
        "out-of-taxonomy error texts used only to choose the threshold.",
        "",
        "| category | tier | examples | template families |",
        "| --- | --- | ---: | ---: |",
    ]
    for c in m["classes"]:
        lines.append(
            f"| `{c}` | {CATEGORY_TIER[c]} | {d['per_class'].get(c, 0)} | "
            f"{d['families_per_class'].get(c, 0)} |"
        )
    lines += [
        "",
        "## Held-out evaluation",
        "",
        f"Grouped {s.get('folds', 5)}-fold cross-validation (StratifiedGroupKFold over template",
        "families joined when their masked texts coincide): every example is predicted by a",
        "model that never saw its template family, with abstain thresholds chosen on the",
        "other folds only. So every score below is on wordings unseen in training.",
        "Abstentions count as errors.",
        "",
        f"- macro-F1: **{s['macro_f1']:.4f}** (argmax, no abstain: {s['macro_f1_no_abstain']:.4f})",
        f"- accuracy: {s['accuracy']:.4f} on {s['n_test']} held-out predictions",
        f"- abstain rate: {s['abstain_rate']:.4f}",
        f"- healthy lines tagged as a failure above the threshold: {s['healthy_false_alarms']}"
        f" (without the threshold: {s['healthy_false_alarms_no_abstain']})",
    ]
    if "ood_refused" in s:
        lines.append(
            f"- out-of-taxonomy error texts refused (abstained): {s['ood_refused']:.4f}"
            f" of {s['n_ood']}"
        )
    lines += [
        f"- shipped thresholds (chosen on all out-of-fold predictions): floor "
        f"{m['threshold']:.2f}, per class {m['class_thresholds']}",
        "",
        "| category | precision | recall | F1 | F1 no abstain | support |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for c, r in s["per_class"].items():
        lines.append(
            f"| `{c}` | {r['precision']:.3f} | {r['recall']:.3f} | {r['f1']:.3f} | "
            f"{r['f1_no_abstain']:.3f} | {r['support']} |"
        )
    labels = s["confusion_labels"]
    short = [lab[:8] for lab in labels]
    lines += [
        "",
        "### Confusion matrix (rows: true, columns: predicted; last column: abstained)",
        "",
        "| true \\ pred | " + " | ".join(short) + " |",
        "| --- | " + " | ".join("---:" for _ in labels) + " |",
    ]
    for lab, row in zip(labels, s["confusion"], strict=False):
        lines.append(f"| `{lab}` | " + " | ".join(str(v) for v in row) + " |")
    lines += [
        "",
        "## Artifact",
        "",
        f"- `{m['artifact']}`, SHA-256 `{m['sha256']}` (checked before loading; plain",
        "  `.npy` arrays read with `allow_pickle=False`: no pickle, no code)",
        f"- versions: {m['versions']}",
        f"- seed {m['seed']}; training took {m['training_seconds']} s; predict "
        f"{m['predict_latency_ms']} ms per event",
        "",
        "## Reproduce",
        "",
        "```bash",
        "python training_data/generate.py          # regenerate training_data/generated.jsonl",
        f"python -m service.classify.training --data training_data --out models --seed {m['seed']}",
        "```",
        "",
        "The final artifact is refitted on all examples with the same recipe and threshold;",
        "the scores above are those of the same recipe with the test families held out.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None, prog: str = "python -m service.classify.training") -> int:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Train the vllm-sentinel text classifier and write a verified artifact.",
    )
    parser.add_argument(
        "--data",
        type=Path,
        default=Path("training_data"),
        help="directory of *.jsonl examples (default: training_data)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("models"),
        help="output directory for the artifact, manifest, model card",
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument(
        "--with-feedback",
        dest="feedback",
        type=Path,
        default=None,
        metavar="FILE",
        help="JSONL of corrections {text, category} to add",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    args = parser.parse_args(argv)
    if importlib.util.find_spec("sklearn") is None:
        print(
            f"{prog}: training needs scikit-learn, which is not installed: "
            "pip install 'vllm-sentinel[train]'",
            file=sys.stderr,
        )
        return 2
    try:
        manifest = train(
            args.data, args.out, seed=args.seed, feedback=args.feedback, quiet=args.quiet
        )
    except (FileNotFoundError, ValueError) as exc:
        print(f"training failed: {exc}", file=sys.stderr)
        return 2
    s = manifest["scores"]
    print(
        json.dumps(
            {
                "macro_f1": s["macro_f1"],
                "threshold": manifest["threshold"],
                "abstain_rate": s["abstain_rate"],
                "healthy_false_alarms": s["healthy_false_alarms"],
                "sha256": manifest["sha256"],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
