"""The model's lifecycle apart from the runtime (#10): scikit-learn is the [train] extra, so
nothing but training imports it; evaluation computes its macro-F1 itself; ``vllm-sentinel
train`` without the extra says what to install in one line."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from service.cli import main
from service.training.evaluate import macro_f1

ROOT = Path(__file__).resolve().parents[1]
KV = ROOT / "tests" / "fixtures" / "real" / "kv-cache-too-small.log"


@pytest.mark.parametrize("seed", range(20))
def test_macro_f1_is_scikit_learns(seed: int) -> None:
    from sklearn.metrics import f1_score

    rng = random.Random(seed)
    cats = ["healthy", "oom_kv_cache", "nccl", "driver", "unknown"][: rng.randint(1, 5)]
    n = rng.randint(1, 60)
    y_true = [rng.choice(cats) for _ in range(n)]
    y_pred = [rng.choice([*cats, "other"]) for _ in range(n)]
    labels = sorted(set(y_true))
    want = f1_score(y_true, y_pred, labels=labels, average="macro", zero_division=0)
    assert macro_f1(y_true, y_pred, labels) == pytest.approx(float(want), abs=1e-12)


RUNTIME_PROBE = """
import importlib, pkgutil, sys
sys.modules["sklearn"] = None  # any import of scikit-learn now fails
import service
for mod in pkgutil.walk_packages(service.__path__, "service."):
    # training's too (it imports scikit-learn where it fits); alembic's migration scripts
    # run inside alembic only
    if ".migrations" not in mod.name:
        importlib.import_module(mod.name)
from service.classify.loader import build_classifier
from service.offline.report import classify_paths
clf = build_classifier()
assert clf.model is not None
(rep,) = classify_paths([sys.argv[1]], clf)
print([i["category"] for i in rep["incidents"] if i["severity"] == "critical"][0])
"""


def test_nothing_but_training_needs_scikit_learn() -> None:
    out = subprocess.run(
        [sys.executable, "-c", RUNTIME_PROBE, str(KV)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "oom_kv_cache"


def test_train_without_the_extra_says_what_to_install(monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "sklearn", None)
    assert main(["train", "--quiet", "--out", "/nonexistent/never-written"]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.count("\n") == 1
    assert "scikit-learn" in out.err and "pip install 'vllm-sentinel[train]'" in out.err
