"""Training: leakage-free group splits, reproducible scores, a verified artifact, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from service.classify.text_model import TextModel
from service.cli import main
from service.taxonomy import CATEGORY_TIER
from service.training.card import model_card
from service.training.examples import Example, load_examples, prepare
from service.training.fit import train
from service.training.recipe import group_splits

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "training_data"

# a small, fast recipe: the behaviour under test is the procedure, not the quality
SMALL = {
    "test_folds": 3,
    "calibration_folds": 2,
    "max_features_word": 3000,
    "max_features_char": 6000,
    "max_features_context": 2000,
}


def _rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def test_no_template_family_straddles_a_split():
    raw, _ = load_examples(DATA)
    examples = prepare(raw, 60, seed=0)
    y = np.array([e.category for e in examples])
    groups = np.array([e.group for e in examples])
    fam_group: dict[str, int] = {}
    for e in examples:  # a family never spans two groups
        assert fam_group.setdefault(e.family, e.group) == e.group
    for a, b in group_splits(y, groups, 5, seed=0):
        assert not set(groups[a].tolist()) & set(groups[b].tolist())
        masked_a = {examples[i].masked for i in a}
        assert not any(examples[i].masked in masked_a for i in b)


def test_training_data_uses_only_taxonomy_labels_and_has_every_category():
    raw, ood = load_examples(DATA)
    cats = {e.category for e in raw}
    assert cats == set(CATEGORY_TIER) - {"unknown"}
    assert ood, "out-of-taxonomy texts are needed to choose the threshold"
    for path in DATA.glob("*.jsonl"):
        for row in _rows(path):
            assert row["source"] and row["family"]
            assert row["tier"] == CATEGORY_TIER[row["category"]]


def test_same_seed_same_scores_and_artifact(tmp_path):
    a = train(DATA, tmp_path / "a", seed=3, config=SMALL, quiet=True, max_examples=450)
    b = train(DATA, tmp_path / "b", seed=3, config=SMALL, quiet=True, max_examples=450)
    assert a["scores"] == b["scores"]
    assert a["threshold"] == b["threshold"]
    assert a["class_thresholds"] == b["class_thresholds"]
    assert a["sha256"] == b["sha256"]
    assert (tmp_path / "a" / "text_model.npz").read_bytes() == (
        tmp_path / "b" / "text_model.npz"
    ).read_bytes()


def test_trained_artifact_loads_and_documents_itself(tmp_path):
    m = train(DATA, tmp_path, seed=0, config=SMALL, quiet=True, max_examples=450)
    for key in (
        "sha256",
        "classes",
        "threshold",
        "class_thresholds",
        "versions",
        "data",
        "scores",
        "seed",
        "config",
    ):
        assert key in m
    assert "sklearn" in m["versions"]
    assert set(m["scores"]["per_class"]) == set(m["classes"])
    card = (tmp_path / "MODEL_CARD.md").read_text()
    assert "Held-out evaluation" in card and "Confusion matrix" in card
    assert "vllm-sentinel train" in card
    model = TextModel.load(tmp_path)
    pred = model.predict(
        "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)"
    )
    assert pred.category in (*m["classes"], "unknown")


def test_the_shipped_card_is_the_generated_one():
    manifest = json.loads((ROOT / "models" / "text_model.json").read_text(encoding="utf-8"))
    assert (ROOT / "models" / "MODEL_CARD.md").read_text(encoding="utf-8") == model_card(manifest)


def _tiny_dataset(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    rows = _rows(DATA / "real.jsonl") + _rows(DATA / "generated.jsonl")
    picked: dict[str, list[dict]] = {}
    for r in rows:
        if len(picked.setdefault(r["category"], [])) < 12:
            picked[r["category"]].append(r)
    with (data / "tiny.jsonl").open("w") as fh:
        for rs in picked.values():
            for r in rs:
                fh.write(json.dumps(r) + "\n")
    (data / "ood.jsonl").write_text(
        json.dumps(
            {"text": "KeyError: 'user_id'", "category": "unknown", "family": "o1", "source": "test"}
        )
        + "\n"
    )
    return data


def test_cli_trains_with_feedback(tmp_path, capsys):
    data = _tiny_dataset(tmp_path)
    feedback = tmp_path / "corrections.jsonl"
    feedback.write_text(
        json.dumps(
            {
                "text": "RuntimeError: NCCL error: remote process exited or there was a "
                "network error",
                "category": "nccl_error",
            }
        )
        + "\n"
        + json.dumps({"text": "ERROR: printer on fire", "category": "unknown"})
        + "\n"
    )
    out = tmp_path / "models"
    rc = main(
        [
            "train",
            "--data",
            str(data),
            "--out",
            str(out),
            "--seed",
            "1",
            "--with-feedback",
            str(feedback),
        ]
    )
    assert rc == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert 0.0 <= summary["macro_f1"] <= 1.0
    manifest = json.loads((out / "text_model.json").read_text())
    assert manifest["data"]["feedback"] == str(feedback)
    assert manifest["data"]["ood_texts"] >= 2
    assert TextModel.load(out).classes == tuple(manifest["classes"])


def test_cli_reports_bad_labels(tmp_path):
    data = tmp_path / "bad"
    data.mkdir()
    (data / "x.jsonl").write_text(
        json.dumps({"text": "x", "category": "gpu_on_fire", "family": "f", "source": "s"}) + "\n"
    )
    assert main(["train", "--data", str(data), "--out", str(tmp_path / "o"), "--quiet"]) == 2


def test_tier_must_match_category(tmp_path):
    data = tmp_path / "bad"
    data.mkdir()
    (data / "x.jsonl").write_text(
        json.dumps(
            {
                "text": "x",
                "category": "nccl_error",
                "tier": "capacity",
                "family": "f",
                "source": "s",
            }
        )
        + "\n"
    )
    with pytest.raises(ValueError, match="tier"):
        load_examples(data)


def _thread_line(line: str, category: str, role: str, thread: str) -> str:
    return json.dumps(
        {
            "line": line,
            "category": category,
            "tier": CATEGORY_TIER[category],
            "role": role,
            "stage": None,
            "program": "vllm",
            "vendor": "nvidia",
            "source": "https://x/1",
            "thread": thread,
            "why": "test",
        }
    )


def test_thread_lines_are_parsed_grouped_by_thread_and_noise_is_healthy(tmp_path):
    data = _tiny_dataset(tmp_path)
    (data / "real_threads").mkdir()
    (data / "real_threads" / "t.jsonl").write_text(
        "\n".join(
            [
                _thread_line(
                    "(EngineCore_DP0 pid=7) ERROR 01-02 03:04:05 [core.py:1] "
                    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                    "2.00 GiB",
                    "oom_runtime",
                    "cause",
                    "github:a/b#1",
                ),
                _thread_line(
                    "INFO 01-02 03:04:05 [core.py:1] Worker failed, retrying",
                    "unknown",
                    "noise",
                    "github:a/b#1",
                ),
                _thread_line(
                    "(EngineCore_DP0 pid=7)     self.model_runner.profile_run()",
                    "unknown",
                    "cascade",
                    "github:a/b#2",
                ),
                _thread_line(
                    "RuntimeError: Engine core initialization failed.",
                    "unknown",
                    "cascade",
                    "github:a/b#2",
                ),
            ]
        )
        + "\n"
    )
    raw, ood = load_examples(data)
    threads = [e for e in raw if e.origin == "thread"]
    assert [(e.category, e.family) for e in threads] == [
        ("oom_runtime", "thread:github:a/b#1"),
        ("healthy", "thread:github:a/b#1"),  # noise trains healthy whatever its label
    ]
    assert threads[0].text.startswith("torch.OutOfMemoryError: CUDA out of memory")
    assert threads[0].asked and not threads[1].asked
    # an error-looking cascade raises the thresholds; a traceback frame is never asked
    assert [e.text for e in ood if e.origin == "thread"] == [
        "RuntimeError: Engine core initialization failed."
    ]


def test_no_thread_is_on_both_sides_of_a_split():
    raw, _ = load_examples(DATA)
    examples = prepare(raw, 60, seed=0)
    y = np.array([e.category for e in examples])
    groups = np.array([e.group for e in examples])
    thread = np.array([e.family if e.origin == "thread" else "" for e in examples])
    assert len(set(thread.tolist())) > 500
    for a, b in group_splits(y, groups, 5, seed=0):
        assert not (set(thread[a].tolist()) & set(thread[b].tolist())) - {""}


def test_generated_variations_are_capped_per_wording_real_strings_are_not():
    gen = [
        Example(f"CUDA out of memory {i} blocks {'x' * i}", "oom_runtime", "f") for i in range(9)
    ]
    for e in gen:
        e.origin = "generated"
    real = [Example("CUDA out of memory while profiling", "oom_runtime", "f")]
    kept = prepare(real + gen, 60, seed=0, max_generated=3)
    assert sum(e.origin == "generated" for e in kept) == 3
    assert any(e.origin != "generated" for e in kept)
