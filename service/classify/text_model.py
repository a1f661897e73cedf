"""The text classifier for error-looking events no signature explains.

A trained artifact is two files side by side (written by :mod:`service.classify.training`):

- ``text_model.skops``: the scikit-learn pipeline (TF-IDF word + character n-grams on masked
  text, a calibrated linear classifier), saved with skops (no pickle);
- ``text_model.json``: the manifest: SHA-256 of the ``.skops`` bytes, classes, the abstain
  threshold chosen on validation data, library versions, data counts, scores.

``TextModel.load`` reads the artifact bytes once, checks their SHA-256 against the manifest
and refuses (``ArtifactError``) on any mismatch; only then are the same bytes deserialised
by skops, with an explicit list of trusted types: an artifact that needs any other type is
refused as well. Nothing is unpickled.

``predict`` returns a :class:`Prediction`. When the top calibrated probability is below the
manifest's threshold the model abstains: category ``unknown``, tier ``other``, and the
masked template of the event, so a novel failure is still visible to users.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..taxonomy import CATEGORY_TIER
from .masking import mask

__all__ = [
    "ArtifactError",
    "Prediction",
    "TextModel",
    "TRUSTED_TYPES",
    "MANIFEST_FORMAT",
    "sha256_bytes",
]

MANIFEST_FORMAT = "vllm-sentinel/text-model@1"
UNKNOWN = "unknown"
TEMPLATE_MAX_CHARS = 600

# Every type a trained pipeline may contain besides skops' default-trusted ones (builtins,
# numpy, scipy sparse, sklearn estimators skops knows). Anything else in an artifact is
# refused rather than loaded.
TRUSTED_TYPES: tuple[str, ...] = (
    "builtins.dict",
    "builtins.list",
    "builtins.tuple",
    "builtins.slice",
    "collections.OrderedDict",
    "numpy.dtype",
    "numpy.float64",
    "numpy.int64",
    "numpy.int32",
    "numpy.ndarray",
    "numpy.str_",
    "numpy.bool_",
    "scipy.sparse._csr.csr_matrix",
    "scipy.sparse._csr.csr_array",
    "sklearn.calibration.CalibratedClassifierCV",
    "sklearn.calibration._CalibratedClassifier",
    "sklearn.calibration._SigmoidCalibration",
    "sklearn.calibration._TemperatureScaling",
    "sklearn.isotonic.IsotonicRegression",
    "sklearn.feature_extraction.text.TfidfVectorizer",
    "sklearn.feature_extraction.text.TfidfTransformer",
    "sklearn.feature_extraction.text.CountVectorizer",
    "sklearn.linear_model._logistic.LogisticRegression",
    "sklearn.linear_model._stochastic_gradient.SGDClassifier",
    "sklearn.linear_model._ridge.RidgeClassifier",
    "sklearn.svm._classes.LinearSVC",
    "sklearn.naive_bayes.ComplementNB",
    "sklearn.pipeline.FeatureUnion",
    "sklearn.compose._column_transformer.ColumnTransformer",
    "sklearn.pipeline.Pipeline",
    "sklearn.preprocessing._label.LabelEncoder",
    "sklearn.preprocessing._label.LabelBinarizer",
    "sklearn.preprocessing._function_transformer.FunctionTransformer",
    "sklearn.frozen._frozen.FrozenEstimator",
    "sklearn.utils._bunch.Bunch",
)


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


def key_line(text: str) -> str:
    """The line of an event that carries its meaning (raw text in, raw line out).

    Traceback frames, the source lines under them, caret markers, cascade headers and
    torch's fixed CUDA-error footer are skipped. Preference: the line after ``Last error:``
    (NCCL), then the last exception line (``XxxError: ...``), then the last error-ish
    line, then the last remaining line.
    """
    lines = text.replace("\r", "").split("\n")
    if len(lines) == 1:
        return text
    kept: list[str] = []
    after_frame = False
    last_error_next = False
    picked_last_error = None
    for line in lines:
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
            picked_last_error = line
            last_error_next = False
        if _LAST_ERROR.match(line):
            last_error_next = True
            continue
        kept.append(line)
    if picked_last_error is not None:
        return picked_last_error
    if not kept:
        return lines[-1]
    for pattern in (_EXC_LINE, _ERRORISH):
        for line in reversed(kept):
            if pattern.search(line):
                return line
    return kept[-1]


def event_fields(text: str) -> tuple[str, str]:
    """(masked key line, masked whole event): the two inputs of the feature pipeline."""
    return mask(key_line(text)), mask(text)


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
    if path.suffix not in ("", ".json") and not path.is_dir() and path != artifact_path:
        raise ArtifactError(f"{path} is not the artifact named by {manifest_path}")
    return manifest_path, manifest, artifact_path


class TextModel:
    """A verified, loaded text classifier. Build one with :meth:`load`."""

    def __init__(self, pipeline: Any, manifest: dict[str, Any]) -> None:
        self._pipeline = pipeline
        self.manifest = manifest
        self.classes: tuple[str, ...] = tuple(str(c) for c in pipeline.classes_)
        self.threshold = float(manifest["threshold"])
        for c in self.classes:
            if c not in CATEGORY_TIER or c == UNKNOWN:
                raise ArtifactError(f"artifact has a class outside the taxonomy: {c!r}")

    # --- loading ---------------------------------------------------------------------------

    @classmethod
    def load(cls, path: Path | str) -> TextModel:
        """Load the model at ``path`` (models dir, manifest or ``.skops`` file) after checking
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
        if "threshold" not in manifest or not 0.0 <= float(manifest["threshold"]) <= 1.0:
            raise ArtifactError(f"{manifest_path}: missing or invalid threshold")
        pipeline = loads_trusted(data)
        return cls(pipeline, manifest)

    @classmethod
    def from_pipeline(cls, pipeline: Any, threshold: float, **manifest: Any) -> TextModel:
        """Wrap an in-memory fitted pipeline (used by training and tests)."""
        return cls(pipeline, {"threshold": threshold, **manifest})

    # --- prediction ------------------------------------------------------------------------

    def predict(self, text: str) -> Prediction:
        return self.predict_many([text])[0]

    def predict_many(self, texts: Iterable[str]) -> list[Prediction]:
        fields = [event_fields(t or "") for t in texts]
        if not fields:
            return []
        proba = self._pipeline.predict_proba(as_matrix(fields))
        return self._decide([f[1] for f in fields], proba)

    def predict_proba_fields(self, fields: Sequence[tuple[str, str]]) -> Any:
        """Class probabilities (columns in ``self.classes`` order) of :func:`event_fields`."""
        return self._pipeline.predict_proba(as_matrix(fields))

    def _decide(self, masked: Sequence[str], proba: Any) -> list[Prediction]:
        out: list[Prediction] = []
        best = proba.argmax(axis=1)
        for i, m in enumerate(masked):
            p = float(proba[i, best[i]])
            category = self.classes[best[i]]
            template = m[:TEMPLATE_MAX_CHARS]
            if not m.strip() or p < self.threshold:
                out.append(Prediction(UNKNOWN, CATEGORY_TIER[UNKNOWN], p, template))
            else:
                out.append(Prediction(category, CATEGORY_TIER[category], p, template))
        return out


def as_matrix(fields: Sequence[tuple[str, str]]) -> Any:
    """The pipeline's input: an (n, 2) object array of (key line, whole event)."""
    import numpy as np

    arr = np.empty((len(fields), 2), dtype=object)
    for i, (k, w) in enumerate(fields):
        arr[i, 0] = k
        arr[i, 1] = w
    return arr


def dumps_pipeline(pipeline: Any) -> bytes:
    """Serialise a fitted pipeline with skops; refuse if it needs an untrusted type."""
    import skops.io as sio

    data = sio.dumps(pipeline)
    untrusted = set(sio.get_untrusted_types(data=data)) - set(TRUSTED_TYPES)
    if untrusted:
        raise ArtifactError(f"pipeline contains types outside TRUSTED_TYPES: {sorted(untrusted)}")
    return data


def loads_trusted(data: bytes) -> Any:
    """Deserialise skops bytes, allowing only :data:`TRUSTED_TYPES` beyond skops' defaults."""
    import skops.io as sio

    try:
        untrusted = set(sio.get_untrusted_types(data=data))
    except Exception as exc:  # corrupt zip, bad schema ...
        raise ArtifactError(f"not a readable skops artifact: {exc}") from exc
    extra = untrusted - set(TRUSTED_TYPES)
    if extra:
        raise ArtifactError(f"artifact needs untrusted types: {sorted(extra)}")
    try:
        return sio.loads(data, trusted=sorted(untrusted))
    except Exception as exc:
        raise ArtifactError(f"could not load skops artifact: {exc}") from exc
