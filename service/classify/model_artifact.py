"""The text model on disk: two files side by side, verified before anything is parsed.

- ``text_model.npz``: the model as plain arrays (vocabulary terms and idf per TF-IDF
  block, the linear classifier's coefficients, the sigmoid calibration parameters) and a
  JSON description of how to featurise; a zip of ``.npy`` files written with fixed
  timestamps (``service.training.export``), read with ``numpy.load(...,
  allow_pickle=False)``: no object arrays, no pickle, no code;
- ``text_model.json``: the manifest: SHA-256 of the ``.npz`` bytes, classes, the abstain
  threshold chosen on validation data, library versions, data counts, scores.

:func:`load_verified` reads the artifact bytes once, checks their SHA-256 against the
manifest and refuses (:class:`ArtifactError`) on any mismatch; only then are the same
bytes parsed.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from .linear_scorer import LinearTextScorer

__all__ = [
    "MANIFEST_FORMAT",
    "ArtifactError",
    "load_verified",
    "loads_artifact",
    "read_manifest",
    "sha256_bytes",
]

MANIFEST_FORMAT = "vllm-sentinel/text-model@1"


class ArtifactError(RuntimeError):
    """The model artifact is missing, altered, or not one this code can load safely."""


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_manifest(path: Path) -> tuple[Path, dict[str, Any], Path]:
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


def load_verified(path: Path) -> tuple[LinearTextScorer, dict[str, Any]]:
    """(scorer, manifest) of the model at ``path`` (models dir, manifest or ``.npz`` file),
    its SHA-256 checked against the manifest. :class:`ArtifactError` when anything is off."""
    manifest_path, manifest, artifact_path = read_manifest(path)
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
    return scorer, manifest


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
