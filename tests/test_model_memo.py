"""The text model's memo: ``predict`` answers exactly what scoring answers, per (text,
context), scores a repeated input once, and stays bounded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from service.classify.model_context import ModelContext
from service.classify.text_model import MEMO_SIZE, MEMO_TEXT_MAX, TextModel

MODELS = Path(__file__).resolve().parents[1] / "models"

TEXTS = [
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
    "NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory",
    "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens",
    "Error: something odd happened",
    "",
]
CONTEXTS = [
    None,
    ModelContext(stage="kv_cache_init", level="ERROR"),
    ModelContext(program="vllm", stage="model_load", library="flash_attn", in_module=True),
]


class CountingScorer:
    """A stand-in scorer: two classes, the answer a function of the text's length."""

    classes = ["healthy", "oom_runtime"]

    def __init__(self) -> None:
        self.calls = 0

    def proba(self, fields: tuple[str, ...]) -> Any:
        self.calls += 1
        p = (len(fields[0]) % 10) / 10
        return np.array([p, 1.0 - p])


def _counting() -> tuple[TextModel, CountingScorer]:
    scorer = CountingScorer()
    return TextModel.from_scorer(scorer, 0.5), scorer  # type: ignore[arg-type]


@pytest.mark.skipif(not (MODELS / "text_model.json").is_file(), reason="no trained model")
def test_remembered_answers_are_the_scored_ones() -> None:
    model = TextModel.load(MODELS)
    for _ in range(2):  # the second round is answered from the memo
        for text in TEXTS:
            for ctx in CONTEXTS:
                assert model.predict(text, ctx) == model.predict_many([text], [ctx])[0]
    assert model.memo_size() == len(TEXTS) * len(CONTEXTS)


def test_a_repeated_input_is_scored_once() -> None:
    model, scorer = _counting()
    first = [model.predict(t, c) for t in TEXTS for c in CONTEXTS]
    calls = scorer.calls
    assert calls == len(TEXTS) * len(CONTEXTS)
    again = [model.predict(t, c) for t in TEXTS for c in CONTEXTS]
    assert again == first
    assert scorer.calls == calls


def test_another_context_is_another_input() -> None:
    model, scorer = _counting()
    model.predict(TEXTS[0], ModelContext(stage="serving"))
    model.predict(TEXTS[0], ModelContext(stage="model_load"))
    model.predict(TEXTS[0])
    assert scorer.calls == 3


def test_the_memo_is_bounded() -> None:
    model, scorer = _counting()
    for i in range(MEMO_SIZE + 50):
        model.predict(f"error number {i}")
    assert model.memo_size() == MEMO_SIZE
    calls = scorer.calls
    model.predict("error number 0")  # the oldest went first
    assert scorer.calls == calls + 1
    model.predict(f"error number {MEMO_SIZE + 49}")  # the newest stayed
    assert scorer.calls == calls + 1


def test_a_long_text_is_not_remembered() -> None:
    model, scorer = _counting()
    long = "x" * (MEMO_TEXT_MAX + 1)
    assert model.predict(long) == model.predict(long)
    assert scorer.calls == 2
    assert model.memo_size() == 0
