"""The fitted pipeline to the artifact: plain arrays, deterministic bytes, checked.

:func:`scorer_from_pipeline` reads the fitted estimators' own arrays (vocabularies, idf,
coefficients, sigmoid parameters) into a
:class:`~service.classify.linear_scorer.LinearTextScorer` and refuses (``ValueError``)
any configuration the scorer does not replicate exactly. :func:`dumps_artifact` writes
the arrays the way :func:`service.classify.model_artifact.loads_artifact` reads them: a
zip of ``.npy`` files with fixed timestamps, so the same model gives the same bytes and
the same SHA-256. :func:`export` does both and checks that the bytes, parsed back,
reproduce the pipeline's ``predict_proba``: otherwise nothing is written.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from collections.abc import Sequence
from typing import Any

import numpy as np

from service.classify.linear_scorer import FeatureBlock, LinearTextScorer
from service.classify.model_artifact import ArtifactError, loads_artifact
from service.classify.model_input import Fields
from service.incidents.codec import JsonObject

from .recipe import as_matrix

__all__ = ["dumps_artifact", "export", "scorer_from_pipeline"]

_FIXED_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def _block(name: str, vec: Any, column: Any, weight: float, offset: int) -> FeatureBlock:
    oov = type(vec).__name__ == "OovAwareTfidf"
    if oov and vec.norm is not None:
        raise ValueError("OovAwareTfidf must be built with norm=None")
    if (
        (not oov and vec.norm != "l2")
        or not vec.use_idf
        or vec.strip_accents is not None
        or vec.preprocessor is not None
        or vec.tokenizer is not None
        or vec.stop_words is not None
        or callable(vec.analyzer)
        or vec.binary
        or vec.input != "content"
    ):
        raise ValueError(f"fast path cannot replicate vectorizer {name}")
    if vec.analyzer == "word" and re.compile(vec.token_pattern).groups > 1:
        raise ValueError("token_pattern with several groups")
    terms = [""] * len(vec.vocabulary_)
    for term, j in vec.vocabulary_.items():
        terms[j] = term
    return FeatureBlock(
        name=name,
        column=int(column),
        analyzer=vec.analyzer,
        ngram=tuple(vec.ngram_range),
        lower=bool(vec.lowercase),
        token_pattern=vec.token_pattern if vec.analyzer == "word" else None,
        sublinear=bool(vec.sublinear_tf),
        offset=offset,
        weight=weight,
        oov_idf=float(np.max(vec.idf_)) if oov else 0.0,
        terms=terms,
        idf=np.asarray(vec.idf_, dtype=np.float64),
    )


def scorer_from_pipeline(pipeline: Any) -> LinearTextScorer:
    """The fitted pipeline (``features``: a ColumnTransformer of TF-IDF blocks; ``clf``: one
    sigmoid-calibrated classifier or a multinomial logistic regression) as a scorer."""
    features = pipeline.named_steps["features"]
    clf = pipeline.named_steps["clf"]
    weights = features.transformer_weights or {}
    blocks: list[FeatureBlock] = []
    offset = 0
    for name, vec, column in features.transformers_:
        if vec in ("drop", "passthrough") or name == "remainder":
            continue
        blocks.append(_block(name, vec, column, float(weights.get(name, 1.0)), offset))
        offset += len(vec.vocabulary_)
    if type(clf).__name__ == "CalibratedClassifierCV":
        if len(clf.calibrated_classifiers_) != 1 or clf.method != "sigmoid":
            raise ValueError("fast path needs one sigmoid-calibrated classifier")
        cc = clf.calibrated_classifiers_[0]
        est = cc.estimator
        if len(cc.classes) < 3:
            raise ValueError("fast path handles multiclass only")
        kind, classes, coef, intercept = "sigmoid", cc.classes, est.coef_, est.intercept_
        a = np.array([c.a_ for c in cc.calibrators], dtype=np.float64)
        b = np.array([c.b_ for c in cc.calibrators], dtype=np.float64)
        order = np.array([list(cc.classes).index(c) for c in est.classes_])
    elif type(clf).__name__ == "LogisticRegression":
        kind, classes, coef, intercept = "softmax", clf.classes_, clf.coef_, clf.intercept_
        if np.shape(coef)[0] != len(classes):
            raise ValueError("fast path handles multinomial logistic regression only")
        a = b = np.zeros(0)
        order = np.arange(len(classes))
    else:
        raise ValueError(f"fast path cannot replicate {type(clf).__name__}")
    if np.shape(coef)[1] != offset:
        raise ValueError("feature count mismatch")
    return LinearTextScorer(
        kind=kind,
        classes=[str(c) for c in classes],
        n_features=offset,
        blocks=blocks,
        coef=coef,
        intercept=intercept,
        a=a,
        b=b,
        order=order,
    )


def _block_meta(block: FeatureBlock) -> JsonObject:
    """How to featurise with ``block``, as the artifact's ``meta`` describes it."""
    return {
        "name": block.name,
        "column": block.column,
        "analyzer": block.analyzer,
        "ngram": list(block.ngram),
        "lower": block.lower,
        "token_pattern": block.token_pattern,
        "sublinear": block.sublinear,
        "offset": block.offset,
        "weight": block.weight,
        "oov_idf": block.oov_idf,
    }


def to_arrays(scorer: LinearTextScorer) -> dict[str, np.ndarray]:
    """The artifact's arrays (what :meth:`LinearTextScorer.from_arrays` reads)."""
    meta = {
        "kind": scorer.kind,
        "classes": scorer.classes,
        "n_features": scorer.n_features,
        "blocks": [_block_meta(b) for b in scorer.blocks],
    }
    arrays: dict[str, np.ndarray] = {"meta": np.array(json.dumps(meta))}
    for i, b in enumerate(scorer.blocks):
        arrays[f"terms_{i}"] = np.array(b.terms, dtype=str)
        arrays[f"idf_{i}"] = b.idf
    arrays.update(
        coef=scorer.coef, intercept=scorer.intercept, a=scorer.a, b=scorer.b, order=scorer.order
    )
    return arrays


def dumps_artifact(scorer: LinearTextScorer) -> bytes:
    """The artifact bytes: a zip of ``.npy`` arrays (like ``numpy.savez_compressed``) with
    fixed timestamps, so the same model gives the same bytes and the same SHA-256."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, arr in sorted(to_arrays(scorer).items()):
            arr = np.asarray(arr)
            if arr.dtype == object:
                raise ArtifactError(f"array {name} has dtype object; refusing to write it")
            info = zipfile.ZipInfo(name + ".npy", date_time=_FIXED_ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            with zf.open(info, "w", force_zip64=True) as fh:
                np.lib.format.write_array(fh, arr, allow_pickle=False)
    return buf.getvalue()


def export(pipeline: Any, check: Sequence[Fields]) -> tuple[bytes, LinearTextScorer]:
    """(artifact bytes, the scorer parsed back from them); :class:`ArtifactError` unless
    the parsed scorer reproduces the pipeline's probabilities on the ``check`` fields."""
    data = dumps_artifact(scorer_from_pipeline(pipeline))
    ref = pipeline.predict_proba(as_matrix(check))
    reloaded = loads_artifact(data)
    got = np.vstack([reloaded.proba(f) for f in check])
    if not np.allclose(ref, got, rtol=1e-6, atol=1e-9):
        raise ArtifactError("exported model does not reproduce the trained pipeline")
    return data, reloaded
