"""The text classifier for error-looking events no signature explains.

A trained artifact is two files side by side (written by :mod:`service.classify.training`):

- ``text_model.npz``: the model as plain arrays (vocabulary terms and idf per TF-IDF
  block, the linear classifier's coefficients, the sigmoid calibration parameters) and a
  JSON description of how to featurise; a zip of ``.npy`` files written with fixed
  timestamps, read with ``numpy.load(..., allow_pickle=False)``: no object arrays, no
  pickle, no code;
- ``text_model.json``: the manifest: SHA-256 of the ``.npz`` bytes, classes, the abstain
  threshold chosen on validation data, library versions, data counts, scores.

``TextModel.load`` reads the artifact bytes once, checks their SHA-256 against the manifest
and refuses (``ArtifactError``) on any mismatch; only then are the same bytes parsed.

Scoring replicates the scikit-learn pipeline used in training (TF-IDF word and character
n-grams of the masked key line, word n-grams of the whole masked event, a linear SVM with
sigmoid calibration): training checks the exported arrays against the pipeline's
``predict_proba`` before writing them. One event costs well under a millisecond.

``predict`` returns a :class:`Prediction`. When the top calibrated probability is below the
manifest's threshold (a global floor, raised per class where validation showed benign
lines resembling that class: ``class_thresholds``) the model abstains: category
``unknown``, tier ``other``, and the masked template of the event, so a novel failure is
still visible to users.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..taxonomy import CATEGORY_TIER
from .masking import mask, mask_lines

if TYPE_CHECKING:  # at run time numpy is imported where it is used
    import numpy as np
    from numpy.typing import NDArray

__all__ = [
    "ArtifactError",
    "LinearTextScorer",
    "event_fields",
    "Prediction",
    "TextModel",
    "MANIFEST_FORMAT",
    "sha256_bytes",
]

MANIFEST_FORMAT = "vllm-sentinel/text-model@1"
UNKNOWN = "unknown"
TEMPLATE_MAX_CHARS = 600

_RANK = r"(?:\[rank\d+\]:\s*)?"
_FRAME_LINE = re.compile(r"^\s*" + _RANK + r'File "')
_SKIP_LINE = re.compile(
    r"^\s*" + _RANK + r"(?:Traceback \(most recent call last\):|The above exception was"
    r"|During handling of the above exception|CUDA kernel errors might be asynchronously"
    r"|For debugging consider passing CUDA_LAUNCH_BLOCKING|Compile with `TORCH_USE_CUDA_DSA`"
    r"|[\^~ ]+$|\.\.\.<\d+ lines>\.\.\.$)"
)
_LAST_ERROR = re.compile(r"^\s*" + _RANK + r"Last error:\s*$")
_EXC_LINE = re.compile(r"^\s*" + _RANK + r"[\w.]*(?:Error|Exception|Exit|Interrupt)\b[\w.]*:")
_ERRORISH = re.compile(
    r"error|fail|fatal|killed|warn|exception|timeout|timed out|cannot|unable|not found|"
    r"too old|insufficient|mismatch|not supported|no such|unsupported|invalid|refused",
    re.IGNORECASE,
)


def key_index(lines: Sequence[str]) -> int:
    """Index of the line of an event that carries its meaning.

    Traceback frames, the source lines under them, caret markers, cascade headers and
    torch's fixed CUDA-error footer are skipped. Preference: the line after ``Last error:``
    (NCCL), then the last exception line (``XxxError: ...``), then the last error-ish
    line, then the last remaining line.
    """
    n = len(lines)
    if n <= 1:
        return 0
    kept: list[int] = []
    after_frame = False
    last_error_next = False
    picked: int | None = None
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        if _FRAME_LINE.match(line):
            after_frame = True
            continue
        if after_frame and line.startswith((" ", "\t", "[rank")) and not _EXC_LINE.match(line):
            after_frame = False
            continue
        after_frame = False
        if _SKIP_LINE.match(line):
            continue
        if last_error_next:
            picked = i
            last_error_next = False
        if _LAST_ERROR.match(line):
            last_error_next = True
            continue
        kept.append(i)
    if picked is not None:
        return picked
    if not kept:
        return n - 1
    for pattern in (_EXC_LINE, _ERRORISH):
        for i in reversed(kept):
            if pattern.search(lines[i]):
                return i
    return kept[-1]


def key_line(text: str) -> str:
    """The raw line of ``text`` that :func:`key_index` picks."""
    lines = text.replace("\r", "").split("\n")
    return lines[key_index(lines)]


def event_fields(text: str) -> tuple[str, str]:
    """(masked key line, masked whole event): the two inputs of the feature pipeline."""
    raw = text.replace("\r", "")
    lines = raw.split("\n")
    masked = mask_lines(raw)
    if len(masked) != len(lines):  # masking never joins lines; be safe anyway
        return mask(key_line(raw)), mask(raw)
    key = masked[key_index(lines)]
    return key, "\n".join(masked).strip()


class ArtifactError(RuntimeError):
    """The model artifact is missing, altered, or not one this code can load safely."""


@dataclass(frozen=True, slots=True)
class Prediction:
    """What the text model says about one event.

    ``probability`` is the calibrated probability of the top class (also when abstaining,
    so callers can see how unsure the model was); ``template`` is the masked event text.
    """

    category: str
    tier: str
    probability: float
    template: str

    @property
    def abstained(self) -> bool:
        return self.category == UNKNOWN


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _resolve(path: Path) -> tuple[Path, dict[str, Any], Path]:
    """(manifest path, manifest, artifact path) for a models dir, a manifest or an artifact."""
    path = Path(path)
    if path.is_dir():
        manifest_path = path / "text_model.json"
    elif path.suffix == ".json":
        manifest_path = path
    else:
        manifest_path = path.with_suffix(".json")
    if not manifest_path.is_file():
        raise ArtifactError(f"model manifest not found: {manifest_path}")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ArtifactError(f"unreadable model manifest {manifest_path}: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise ArtifactError(f"{manifest_path} is not a {MANIFEST_FORMAT} manifest")
    artifact_name = manifest.get("artifact")
    if not isinstance(artifact_name, str) or "/" in artifact_name or "\\" in artifact_name:
        raise ArtifactError(f"{manifest_path}: bad artifact name {artifact_name!r}")
    artifact_path = manifest_path.parent / artifact_name
    if path.suffix not in ("", ".json") and not path.is_dir() and path.name != artifact_path.name:
        raise ArtifactError(f"{path} is not the artifact named by {manifest_path}")
    return manifest_path, manifest, artifact_path


class LinearTextScorer:
    """The fitted pipeline's arithmetic, one event at a time, from plain arrays.

    ``from_pipeline`` reads the fitted estimators' own arrays (vocabularies, idf,
    coefficients, sigmoid parameters) and refuses (``ValueError``) any configuration it
    does not replicate exactly; ``to_arrays``/``from_arrays`` are the artifact format.
    sklearn's own ``predict_proba`` costs ~10 ms for a single row (validation,
    ColumnTransformer plumbing, one calibrator call per class); this costs a fraction."""

    _WS = re.compile(r"\s\s+")
    # set by from_pipeline / from_arrays (numpy arrays: coef, intercept, a, b, order, coef_t)
    kind: str
    classes: list[str]
    n_classes: int
    n_features: int
    coef: NDArray[np.float64]
    intercept: NDArray[np.float64]
    a: NDArray[np.float64]
    b: NDArray[np.float64]
    order: NDArray[np.int64]
    coef_t: NDArray[np.float64]

    def __init__(self) -> None:
        import numpy as np

        self._np = np
        self.blocks: list[dict[str, Any]] = []

    @classmethod
    def from_pipeline(cls, pipeline: Any) -> LinearTextScorer:
        import numpy as np

        self = cls()
        features = pipeline.named_steps["features"]
        clf = pipeline.named_steps["clf"]
        weights = features.transformer_weights or {}
        self.blocks = []
        offset = 0
        for name, vec, column in features.transformers_:
            if vec in ("drop", "passthrough") or name == "remainder":
                continue
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
            token_re = re.compile(vec.token_pattern) if vec.analyzer == "word" else None
            if token_re is not None and token_re.groups > 1:
                raise ValueError("token_pattern with several groups")
            terms = [""] * len(vec.vocabulary_)
            for term, j in vec.vocabulary_.items():
                terms[j] = term
            self.blocks.append(
                {
                    "name": name,
                    "column": int(column),
                    "analyzer": vec.analyzer,
                    "ngram": tuple(vec.ngram_range),
                    "lower": bool(vec.lowercase),
                    "token_pattern": vec.token_pattern if vec.analyzer == "word" else None,
                    "token_re": token_re,
                    "sublinear": bool(vec.sublinear_tf),
                    "terms": terms,
                    "vocab": dict(vec.vocabulary_),
                    "idf": np.asarray(vec.idf_, dtype=np.float64),
                    "offset": offset,
                    "weight": float(weights.get(name, 1.0)),
                    "oov_idf": float(np.max(vec.idf_)) if oov else 0.0,
                }
            )
            offset += len(vec.vocabulary_)
        self.n_features = offset
        if type(clf).__name__ == "CalibratedClassifierCV":
            if len(clf.calibrated_classifiers_) != 1 or clf.method != "sigmoid":
                raise ValueError("fast path needs one sigmoid-calibrated classifier")
            cc = clf.calibrated_classifiers_[0]
            est = cc.estimator
            order = [list(cc.classes).index(c) for c in est.classes_]
            self.coef = np.asarray(est.coef_, dtype=np.float64)
            self.intercept = np.asarray(est.intercept_, dtype=np.float64)
            self.a = np.array([c.a_ for c in cc.calibrators], dtype=np.float64)
            self.b = np.array([c.b_ for c in cc.calibrators], dtype=np.float64)
            self.order = np.array(order)
            self.n_classes = len(cc.classes)
            self.classes = [str(c) for c in cc.classes]
            self.kind = "sigmoid"
            if self.n_classes < 3:
                raise ValueError("fast path handles multiclass only")
        elif type(clf).__name__ == "LogisticRegression":
            self.coef = np.asarray(clf.coef_, dtype=np.float64)
            self.intercept = np.asarray(clf.intercept_, dtype=np.float64)
            self.n_classes = len(clf.classes_)
            self.classes = [str(c) for c in clf.classes_]
            self.a = self.b = np.zeros(0)
            self.order = np.arange(self.n_classes)
            self.kind = "softmax"
            if self.coef.shape[0] != self.n_classes:
                raise ValueError("fast path handles multinomial logistic regression only")
        else:
            raise ValueError(f"fast path cannot replicate {type(clf).__name__}")
        if self.coef.shape[1] != self.n_features:
            raise ValueError("feature count mismatch")
        self._finish()
        return self

    def _finish(self) -> None:
        # rows = features: the coefficients of one feature are contiguous for gathering
        self.coef_t = self._np.ascontiguousarray(self.coef.T, dtype=self._np.float64)

    # --- artifact format -------------------------------------------------------------------

    def to_arrays(self) -> dict[str, Any]:
        np = self._np
        meta = {
            "kind": self.kind,
            "classes": self.classes,
            "n_features": self.n_features,
            "blocks": [
                {
                    k: (list(v) if isinstance(v, tuple) else v)
                    for k, v in b.items()
                    if k
                    in (
                        "name",
                        "column",
                        "analyzer",
                        "ngram",
                        "lower",
                        "token_pattern",
                        "sublinear",
                        "offset",
                        "weight",
                        "oov_idf",
                    )
                }
                for b in self.blocks
            ],
        }
        arrays: dict[str, Any] = {"meta": np.array(json.dumps(meta))}
        for i, b in enumerate(self.blocks):
            arrays[f"terms_{i}"] = np.array(b["terms"], dtype=str)
            arrays[f"idf_{i}"] = b["idf"]
        arrays.update(
            coef=self.coef, intercept=self.intercept, a=self.a, b=self.b, order=self.order
        )
        return arrays

    @classmethod
    def from_arrays(cls, arrays: Any) -> LinearTextScorer:
        np_ = __import__("numpy")
        self = cls()
        meta = json.loads(str(arrays["meta"]))
        self.kind = meta["kind"]
        if self.kind not in ("sigmoid", "softmax"):
            raise ValueError(f"unknown model kind {self.kind!r}")
        self.classes = [str(c) for c in meta["classes"]]
        self.n_classes = len(self.classes)
        self.n_features = int(meta["n_features"])
        for i, b in enumerate(meta["blocks"]):
            terms = [str(t) for t in arrays[f"terms_{i}"].tolist()]
            block = dict(b)
            block["ngram"] = tuple(b["ngram"])
            block["terms"] = terms
            block["vocab"] = {t: j for j, t in enumerate(terms)}
            block["idf"] = np_.asarray(arrays[f"idf_{i}"], dtype=np_.float64)
            block["token_re"] = re.compile(b["token_pattern"]) if b["token_pattern"] else None
            block["oov_idf"] = float(b.get("oov_idf", 0.0))
            if block["analyzer"] not in ("word", "char_wb", "char"):
                raise ValueError(f"unknown analyzer {block['analyzer']!r}")
            if len(block["idf"]) != len(terms):
                raise ValueError("idf and vocabulary sizes differ")
            self.blocks.append(block)
        self.coef = np_.asarray(arrays["coef"], dtype=np_.float64)
        self.intercept = np_.asarray(arrays["intercept"], dtype=np_.float64)
        self.a = np_.asarray(arrays["a"], dtype=np_.float64)
        self.b = np_.asarray(arrays["b"], dtype=np_.float64)
        self.order = np_.asarray(arrays["order"], dtype=np_.int64)
        if self.coef.shape != (self.n_classes, self.n_features):
            raise ValueError("coefficient matrix has the wrong shape")
        self._finish()
        return self

    def _terms(self, block: dict, text: str) -> list[str]:
        if block["lower"]:
            text = text.lower()
        lo, hi = block["ngram"]
        if block["analyzer"] == "word":
            tokens = block["token_re"].findall(text)
            if hi == 1:
                return tokens
            out = list(tokens) if lo == 1 else []
            n_tok = len(tokens)
            for n in range(max(lo, 2), min(hi + 1, n_tok + 1)):
                for i in range(n_tok - n + 1):
                    out.append(" ".join(tokens[i : i + n]))
            return out
        if block["analyzer"] == "char_wb":
            out = []
            for w in self._WS.sub(" ", text).split():
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
        if block["analyzer"] == "char":
            t = self._WS.sub(" ", text)
            n_t = len(t)
            return [
                t[i : i + n] for n in range(lo, min(hi + 1, n_t + 1)) for i in range(n_t - n + 1)
            ]
        raise ValueError(block["analyzer"])

    def proba(self, fields: tuple[str, str]) -> Any:
        np = self._np
        idx_all: list[Any] = []
        val_all: list[Any] = []
        for block in self.blocks:
            counts: dict[int, int] = {}
            unknown: dict[str, int] = {}
            vocab = block["vocab"]
            for term in self._terms(block, fields[block["column"]]):
                j = vocab.get(term)
                if j is not None:
                    counts[j] = counts.get(j, 0) + 1
                else:
                    unknown[term] = unknown.get(term, 0) + 1
            if not counts:
                continue
            idx = np.fromiter(counts.keys(), dtype=np.int64, count=len(counts))
            tf = np.fromiter(counts.values(), dtype=np.float64, count=len(counts))
            if block["sublinear"]:
                tf = np.log(tf) + 1.0
            vals = tf * block["idf"][idx]
            sq = float(np.dot(vals, vals))
            if block["oov_idf"] and unknown:
                utf = np.fromiter(unknown.values(), dtype=np.float64, count=len(unknown))
                if block["sublinear"]:
                    utf = np.log(utf) + 1.0
                sq += float(np.dot(utf, utf)) * block["oov_idf"] ** 2
            norm = np.sqrt(sq)
            if norm > 0:
                vals = vals / norm
            idx_all.append(idx + block["offset"])
            val_all.append(vals * block["weight"])
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


class TextModel:
    """A verified, loaded text classifier. Build one with :meth:`load`."""

    def __init__(self, scorer: LinearTextScorer, manifest: dict[str, Any]) -> None:
        self._scorer = scorer
        self.manifest = manifest
        self.classes: tuple[str, ...] = tuple(scorer.classes)
        self.threshold = float(manifest["threshold"])
        for c in self.classes:
            if c not in CATEGORY_TIER or c == UNKNOWN:
                raise ArtifactError(f"artifact has a class outside the taxonomy: {c!r}")
        extra = manifest.get("class_thresholds") or {}
        if not isinstance(extra, dict) or any(
            c not in self.classes or not 0.0 <= float(v) <= 1.0 for c, v in extra.items()
        ):
            raise ArtifactError("invalid class_thresholds in manifest")
        # per class: the global floor, raised where benign lines resemble the class
        self.class_thresholds = {
            c: max(self.threshold, float(extra.get(c, 0.0))) for c in self.classes
        }

    # --- loading ---------------------------------------------------------------------------

    @classmethod
    def load(cls, path: Path | str) -> TextModel:
        """Load the model at ``path`` (models dir, manifest or ``.npz`` file) after checking
        its SHA-256 against the manifest. Raises :class:`ArtifactError` when anything is off."""
        manifest_path, manifest, artifact_path = _resolve(Path(path))
        expected = manifest.get("sha256")
        if not isinstance(expected, str) or len(expected) != 64:
            raise ArtifactError(f"{manifest_path}: no valid sha256 in manifest")
        try:
            data = artifact_path.read_bytes()
        except OSError as exc:
            raise ArtifactError(f"model artifact not readable: {artifact_path}: {exc}") from exc
        actual = sha256_bytes(data)
        if actual != expected.lower():
            raise ArtifactError(
                f"model artifact {artifact_path} does not match its manifest "
                f"(sha256 {actual} != {expected}); refusing to load it"
            )
        try:
            threshold = float(manifest["threshold"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ArtifactError(f"{manifest_path}: missing or invalid threshold") from exc
        if not 0.0 <= threshold <= 1.0:
            raise ArtifactError(f"{manifest_path}: threshold {threshold} outside [0, 1]")
        scorer = loads_artifact(data)
        if list(scorer.classes) != list(manifest.get("classes", scorer.classes)):
            raise ArtifactError(f"{manifest_path}: classes differ from the artifact's")
        return cls(scorer, manifest)

    @classmethod
    def from_scorer(cls, scorer: LinearTextScorer, threshold: float, **manifest: Any) -> TextModel:
        """Wrap an in-memory scorer (used by training and tests)."""
        return cls(scorer, {"threshold": threshold, **manifest})

    # --- prediction ------------------------------------------------------------------------

    def predict(self, text: str) -> Prediction:
        return self.predict_many([text])[0]

    def predict_many(self, texts: Iterable[str]) -> list[Prediction]:
        import numpy as np

        fields = [event_fields(t or "") for t in texts]
        if not fields:
            return []
        proba = np.vstack([self._scorer.proba(f) for f in fields])
        return self._decide([f[1] for f in fields], proba)

    def predict_proba(self, text: str) -> dict[str, float]:
        """Calibrated probability of every class for one event."""
        p = self._scorer.proba(event_fields(text or ""))
        return {c: float(p[i]) for i, c in enumerate(self.classes)}

    def _decide(self, masked: Sequence[str], proba: Any) -> list[Prediction]:
        out: list[Prediction] = []
        best = proba.argmax(axis=1)
        for i, m in enumerate(masked):
            p = float(proba[i, best[i]])
            category = self.classes[best[i]]
            template = m[:TEMPLATE_MAX_CHARS]
            if not m.strip() or p < self.class_thresholds[category]:
                out.append(Prediction(UNKNOWN, CATEGORY_TIER[UNKNOWN], p, template))
            else:
                out.append(Prediction(category, CATEGORY_TIER[category], p, template))
        return out


def as_matrix(fields: Sequence[tuple[str, str]]) -> Any:
    """The training pipeline's input: an (n, 2) object array of (key line, whole event)."""
    import numpy as np

    arr = np.empty((len(fields), 2), dtype=object)
    for i, (k, w) in enumerate(fields):
        arr[i, 0] = k
        arr[i, 1] = w
    return arr


_FIXED_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def dumps_artifact(scorer: LinearTextScorer) -> bytes:
    """The artifact bytes: a zip of ``.npy`` arrays (like ``numpy.savez_compressed``) with
    fixed timestamps, so the same model gives the same bytes and the same SHA-256."""
    import io
    import zipfile

    import numpy as np

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, arr in sorted(scorer.to_arrays().items()):
            arr = np.asarray(arr)
            if arr.dtype == object:
                raise ArtifactError(f"array {name} has dtype object; refusing to write it")
            info = zipfile.ZipInfo(name + ".npy", date_time=_FIXED_ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            with zf.open(info, "w", force_zip64=True) as fh:
                np.lib.format.write_array(fh, arr, allow_pickle=False)
    return buf.getvalue()


def loads_artifact(data: bytes) -> LinearTextScorer:
    """Parse artifact bytes (already checksum-verified) without pickle."""
    import io
    import zipfile

    import numpy as np

    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
        return LinearTextScorer.from_arrays(arrays)
    except (ValueError, KeyError, OSError, zipfile.BadZipFile, json.JSONDecodeError) as exc:
        raise ArtifactError(f"not a readable text-model artifact: {exc}") from exc
