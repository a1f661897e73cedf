"""The text model's arithmetic, one event at a time, from plain arrays (numpy only).

A :class:`LinearTextScorer` replicates the fitted scikit-learn pipeline exactly: TF-IDF
blocks (word and character n-grams of the masked key line, word n-grams of the whole
masked event; sublinear tf, idf, an L2 norm that also counts the terms the block does not
know), weighted and concatenated, then a linear classifier with sigmoid calibration (one
sigmoid per class, normalised) or a softmax. Training exports the pipeline to these
arrays and checks them against the pipeline's ``predict_proba`` before writing them
(``service.training.export``). scikit-learn's own ``predict_proba`` costs ~10 ms for a
single row (validation, ColumnTransformer plumbing, one calibrator call per class); this
costs a fraction.

:meth:`LinearTextScorer.from_arrays` reads the artifact's arrays and refuses
(``ValueError``) anything it cannot replicate.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time numpy is imported where it is used
    import numpy as np
    from numpy.typing import NDArray

__all__ = ["ANALYZERS", "FeatureBlock", "LinearTextScorer"]

ANALYZERS = ("word", "char_wb", "char")
KINDS = ("sigmoid", "softmax")
_WS = re.compile(r"\s\s+")


@dataclass(slots=True)
class FeatureBlock:
    """One TF-IDF block of the feature vector: which field it reads, how it cuts it into
    terms, its vocabulary (``terms[j]`` is feature ``offset + j``) and idf, its weight."""

    name: str
    column: int  # 0: the masked key line, 1: the whole masked event, 2: the context words
    analyzer: str  # one of ANALYZERS
    ngram: tuple[int, int]
    lower: bool
    token_pattern: str | None  # word blocks only
    sublinear: bool
    offset: int
    weight: float
    oov_idf: float  # weight of an unknown term in the norm (0: unknown terms are ignored)
    terms: list[str]
    idf: NDArray[np.float64]
    vocab: dict[str, int] = field(init=False)
    token_re: re.Pattern[str] | None = field(init=False)

    def __post_init__(self) -> None:
        if self.analyzer not in ANALYZERS:
            raise ValueError(f"unknown analyzer {self.analyzer!r}")
        if len(self.idf) != len(self.terms):
            raise ValueError("idf and vocabulary sizes differ")
        self.vocab = {t: j for j, t in enumerate(self.terms)}
        self.token_re = re.compile(self.token_pattern) if self.token_pattern else None

    def terms_of(self, text: str) -> list[str]:
        """The terms of ``text`` as the block's vectorizer cuts them (unknown ones too)."""
        if self.lower:
            text = text.lower()
        lo, hi = self.ngram
        if self.analyzer == "word":
            assert self.token_re is not None
            tokens = self.token_re.findall(text)
            if hi == 1:
                return tokens
            out = list(tokens) if lo == 1 else []
            n_tok = len(tokens)
            for n in range(max(lo, 2), min(hi + 1, n_tok + 1)):
                for i in range(n_tok - n + 1):
                    out.append(" ".join(tokens[i : i + n]))
            return out
        if self.analyzer == "char_wb":
            out = []
            for w in _WS.sub(" ", text).split():
                w = " " + w + " "
                w_len = len(w)
                for n in range(lo, hi + 1):
                    offset = 0
                    out.append(w[offset : offset + n])
                    while offset + n < w_len:
                        offset += 1
                        out.append(w[offset : offset + n])
                    if offset == 0:
                        break
            return out
        t = _WS.sub(" ", text)  # char
        n_t = len(t)
        return [t[i : i + n] for n in range(lo, min(hi + 1, n_t + 1)) for i in range(n_t - n + 1)]


class LinearTextScorer:
    """Calibrated class probabilities of one event's (key line, whole event, context) fields.

    ``kind`` ``sigmoid``: a linear SVM's decision per class through its sigmoid (``a``,
    ``b``; ``order`` maps the SVM's classes to the calibrated ones), normalised;
    ``softmax``: multinomial logistic regression."""

    def __init__(
        self,
        *,
        kind: str,
        classes: list[str],
        n_features: int,
        blocks: list[FeatureBlock],
        coef: Any,
        intercept: Any,
        a: Any,
        b: Any,
        order: Any,
    ) -> None:
        import numpy as np

        if kind not in KINDS:
            raise ValueError(f"unknown model kind {kind!r}")
        self._np = np
        self.kind = kind
        self.classes = list(classes)
        self.n_classes = len(self.classes)
        self.n_features = int(n_features)
        self.blocks = blocks
        self.coef: NDArray[np.float64] = np.asarray(coef, dtype=np.float64)
        self.intercept: NDArray[np.float64] = np.asarray(intercept, dtype=np.float64)
        self.a: NDArray[np.float64] = np.asarray(a, dtype=np.float64)
        self.b: NDArray[np.float64] = np.asarray(b, dtype=np.float64)
        self.order: NDArray[np.int64] = np.asarray(order, dtype=np.int64)
        if self.coef.shape != (self.n_classes, self.n_features):
            raise ValueError("coefficient matrix has the wrong shape")
        # rows = features: the coefficients of one feature are contiguous for gathering
        self.coef_t: NDArray[np.float64] = np.ascontiguousarray(self.coef.T, dtype=np.float64)

    @classmethod
    def from_arrays(cls, arrays: Any) -> LinearTextScorer:
        """The scorer from the artifact's arrays (``meta``: a JSON description of the
        blocks; ``terms_<i>``/``idf_<i>`` per block; ``coef``, ``intercept``, ``a``,
        ``b``, ``order``)."""
        import numpy as np

        meta = json.loads(str(arrays["meta"]))
        blocks = []
        for i, b in enumerate(meta["blocks"]):
            lo, hi = b["ngram"]
            blocks.append(
                FeatureBlock(
                    name=b["name"],
                    column=b["column"],
                    analyzer=b["analyzer"],
                    ngram=(lo, hi),
                    lower=b["lower"],
                    token_pattern=b["token_pattern"],
                    sublinear=b["sublinear"],
                    offset=b["offset"],
                    weight=b["weight"],
                    oov_idf=float(b.get("oov_idf", 0.0)),
                    terms=[str(t) for t in arrays[f"terms_{i}"].tolist()],
                    idf=np.asarray(arrays[f"idf_{i}"], dtype=np.float64),
                )
            )
        return cls(
            kind=meta["kind"],
            classes=[str(c) for c in meta["classes"]],
            n_features=int(meta["n_features"]),
            blocks=blocks,
            coef=arrays["coef"],
            intercept=arrays["intercept"],
            a=arrays["a"],
            b=arrays["b"],
            order=arrays["order"],
        )

    def proba(self, fields: tuple[str, ...]) -> Any:
        np = self._np
        idx_all: list[Any] = []
        val_all: list[Any] = []
        for block in self.blocks:
            counts: dict[int, int] = {}
            unknown: dict[str, int] = {}
            vocab = block.vocab
            for term in block.terms_of(fields[block.column]):
                j = vocab.get(term)
                if j is not None:
                    counts[j] = counts.get(j, 0) + 1
                else:
                    unknown[term] = unknown.get(term, 0) + 1
            if not counts:
                continue
            idx = np.fromiter(counts.keys(), dtype=np.int64, count=len(counts))
            tf = np.fromiter(counts.values(), dtype=np.float64, count=len(counts))
            if block.sublinear:
                tf = np.log(tf) + 1.0
            vals = tf * block.idf[idx]
            sq = float(np.dot(vals, vals))
            if block.oov_idf and unknown:
                utf = np.fromiter(unknown.values(), dtype=np.float64, count=len(unknown))
                if block.sublinear:
                    utf = np.log(utf) + 1.0
                sq += float(np.dot(utf, utf)) * block.oov_idf**2
            norm = np.sqrt(sq)
            if norm > 0:
                vals = vals / norm
            idx_all.append(idx + block.offset)
            val_all.append(vals * block.weight)
        if idx_all:
            idx = np.concatenate(idx_all)
            vals = np.concatenate(val_all)
            decision = vals @ self.coef_t[idx] + self.intercept
        else:
            decision = self.intercept.copy()
        if self.kind == "softmax":
            z = decision - decision.max()
            e = np.exp(z)
            return e / e.sum()
        p = np.zeros(self.n_classes)
        p[self.order] = 1.0 / (1.0 + np.exp(self.a * decision + self.b))
        total = p.sum()
        if total == 0:
            return np.full(self.n_classes, 1.0 / self.n_classes)
        p = p / total
        p[(p > 1.0) & (p <= 1.0 + 1e-5)] = 1.0
        return p
