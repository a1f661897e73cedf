"""The shipped model is pinned by digest in the package: a swapped or corrupt model means
signatures only, a warning and a metric, never a dead service."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from service import metrics
from service.classify.loader import MODELS_DIR, build_classifier, check_pin, load_text_model
from service.classify.model_artifact import ArtifactError, sha256_bytes
from service.classify.model_pin import PINNED
from service.records import LogRecord
from service.training.pin import PIN_FILE, write_pin

OOM = (
    "(EngineCore_DP0 pid=7) ERROR 01-01 00:00:00 [core.py:1] torch.OutOfMemoryError: CUDA "
    "out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB"
)


def failures() -> float:
    return metrics.MODEL_LOAD_FAILURES._value.get()


def swapped_models(tmp_path: Path) -> Path:
    """A consistent but different model: artifact changed and the manifest re-hashed to
    match (what an attacker who can write both files does)."""
    d = tmp_path / "models"
    shutil.copytree(MODELS_DIR, d)
    art = d / "text_model.npz"
    data = bytearray(art.read_bytes())
    data[-100] ^= 0xFF
    art.write_bytes(bytes(data))
    manifest = json.loads((d / "text_model.json").read_text())
    manifest["sha256"] = sha256_bytes(bytes(data))
    (d / "text_model.json").write_text(json.dumps(manifest))
    return d


def test_the_shipped_model_matches_its_pinned_digests() -> None:
    check_pin(MODELS_DIR, PINNED)
    assert load_text_model() is not None and metrics.MODEL_LOADED._value.get() == 1


def test_artifact_and_manifest_swapped_together_are_refused(tmp_path, caplog) -> None:
    d = swapped_models(tmp_path)
    before = failures()
    with caplog.at_level(logging.WARNING):
        assert load_text_model(d, pinned=PINNED) is None
    assert failures() == before + 1 and metrics.MODEL_LOADED._value.get() == 0
    assert "signatures only" in caplog.text and "not the shipped file" in caplog.text
    with pytest.raises(ArtifactError):
        load_text_model(d, pinned=PINNED, strict=True)


def test_a_corrupt_artifact_leaves_a_working_classifier_on_signatures(tmp_path) -> None:
    d = tmp_path / "models"
    shutil.copytree(MODELS_DIR, d)
    (d / "text_model.npz").write_bytes(b"PK\x03\x04 not a model")
    clf = build_classifier(models_dir=d)
    assert clf.model is None
    changes = clf.feed(LogRecord("ns/p/vllm", OOM))
    assert changes and changes[0].incident.primary.category.startswith("oom")


def test_training_rewrites_the_pin(tmp_path) -> None:
    pin = tmp_path / "model_pin.py"
    shutil.copy(PIN_FILE, pin)
    d = swapped_models(tmp_path)
    write_pin(d, pin_file=pin)
    ns: dict = {}
    exec(compile(pin.read_text(), str(pin), "exec"), ns)  # noqa: S102 - our own generated file
    check_pin(d, ns["PINNED"])
    assert ns["PINNED"]["text_model.npz"] != PINNED["text_model.npz"]
