"""The recipe: the scikit-learn pipeline of the text model, its settings, fitting it.

Features: TF-IDF word and character n-grams of an event's masked key line and word
n-grams of the whole masked event (:func:`service.classify.model_input.event_fields`),
each block's L2 norm also counting the terms it does not know; then a linear SVM with
sigmoid calibration on group folds (or a multinomial logistic regression).
:class:`service.classify.linear_scorer.LinearTextScorer` replicates exactly this
arithmetic at run time; ``service.training.export`` refuses a pipeline it cannot.

scikit-learn (the ``[train]`` extra) is imported by the functions that use it, so the
package stays importable without it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from service.classify.model_input import Fields

__all__ = ["MODEL_CONFIG", "as_matrix", "build_pipeline", "fit_pipeline", "group_splits"]

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
    # the stream's context words (program, stage reached, level, kind, exception type,
    # innermost frame's library: service/classify/model_context.py), one block of its own
    "stream_weight": 0.3,
    # the abstain floor never below this: whole logs ask the model about many more
    # error-looking lines than the validation folds hold (false alarms cost a page)
    "min_threshold": 0.5,
    "min_df": 1,
    "classifier": "linearsvc",
    "C": 0.25,
    "calibration": "sigmoid",
    "calibration_folds": 5,
    "test_folds": 5,
    "max_per_family": 60,
    # generated variations of one wording kept (augmentation of the real lines, #19)
    "max_generated_per_family": 6,
}


def _oov_tfidf_class() -> type:
    from sklearn.feature_extraction.text import TfidfVectorizer

    class OovAwareTfidf(TfidfVectorizer):  # type: ignore[misc]  # scikit-learn is untyped
        """TF-IDF whose L2 norm also counts the terms it does not know.

        A plain TfidfVectorizer drops unknown terms before normalising, so a text made of
        unfamiliar words keeps full weight on its few familiar ones ("ERROR: the flux
        capacitor overheated" becomes mostly "error") and the classifier is confidently
        wrong. Here every unknown term adds (tf x the largest idf)^2 to the norm: unfamiliar
        text gets small feature values, a decision near the intercepts, and the model
        abstains. Construct with ``norm=None``; the normalisation is done here."""

        def fit_transform(self, raw_documents: Iterable[str], y: Any = None) -> Any:
            docs = list(raw_documents)
            return self._oov_normalise(super().fit_transform(docs, y), docs)

        def transform(self, raw_documents: Iterable[str]) -> Any:
            docs = list(raw_documents)
            return self._oov_normalise(super().transform(docs), docs)

        def _oov_normalise(self, X: Any, docs: list[str]) -> Any:
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
    """Features: TF-IDF word and character n-grams of the event's key line (column 0),
    word n-grams of the whole masked event (column 1: frames, stage lines) and the stream's
    context words (column 2); then a linear classifier with calibrated probabilities."""
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
    if config.get("stream_weight", 0) > 0:
        stream = TfidfVectorizer(
            analyzer="word",
            ngram_range=(1, 1),
            token_pattern=r"(?u)\b\w[\w.]*\b",
            lowercase=True,
            sublinear_tf=True,
            min_df=1,
            norm=norm,
            dtype=np.float64,
        )
        transformers.append(("stream", stream, 2))
        weights["stream"] = float(config["stream_weight"])
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


def group_splits(
    y: np.ndarray, groups: np.ndarray, n: int, seed: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """``n`` class-stratified folds of whole groups (``StratifiedGroupKFold``): no group is
    ever on both sides of a split."""
    from sklearn.model_selection import StratifiedGroupKFold

    n = max(2, min(n, len(set(groups.tolist()))))
    skf = StratifiedGroupKFold(n_splits=n, shuffle=True, random_state=seed)
    return list(skf.split(np.zeros(len(y)), y, groups))


def fit_pipeline(
    config: dict[str, Any],
    seed: int,
    fields: list[Fields],
    y: np.ndarray,
    groups: np.ndarray,
) -> Any:
    """The recipe fitted on ``fields``; a linear SVM is calibrated on group folds of them."""
    cv = None
    if config["classifier"] == "linearsvc":
        cv = group_splits(y, groups, config["calibration_folds"], seed + 1)
    pipe = build_pipeline(config, seed, cv=cv)
    pipe.fit(as_matrix(fields), y)
    # TfidfVectorizer keeps every term pruned by max_features in ``stop_words_``: only
    # needed for introspection, and by far the largest part of a saved artifact.
    for _, vec, _ in pipe.named_steps["features"].transformers_:
        if hasattr(vec, "stop_words_"):
            delattr(vec, "stop_words_")
    return pipe


def as_matrix(fields: Sequence[Fields]) -> Any:
    """The pipeline's input: an (n, 3) object array of (key line, whole event, context)."""
    arr = np.empty((len(fields), 3), dtype=object)
    for i, (k, w, c) in enumerate(fields):
        arr[i, 0] = k
        arr[i, 1] = w
        arr[i, 2] = c
    return arr
