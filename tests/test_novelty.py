"""Novelty detection: drain3 template mining on masked text, bounded, JSON state."""

from __future__ import annotations

import json

import pytest

from service.classify.novelty import NoveltyDetector


def test_first_message_of_a_template_is_novel_then_not():
    d = NoveltyDetector()
    t1, novel1 = d.observe("Worker proc VllmWorker-0 died unexpectedly, shutting down executor.")
    t2, novel2 = d.observe("Worker proc VllmWorker-3 died unexpectedly, shutting down executor.")
    assert novel1 is True
    assert novel2 is False
    assert t1 == t2 == "Worker proc VllmWorker-<NUM> died unexpectedly, shutting down executor."


def test_templates_are_masked():
    d = NoveltyDetector()
    template, _ = d.observe(
        "NCCL WARN Error: failed to extend /dev/shm/nccl-Ab3x to 33030532 bytes"
    )
    assert "<PATH>" in template and "<SIZE>" in template


def test_different_failures_are_different_clusters():
    d = NoveltyDetector()
    _, a = d.observe("RuntimeError: NCCL error: unhandled system error")
    _, b = d.observe("ValueError: No available memory for the cache blocks.")
    assert a and b
    assert d.cluster_count == 2


def test_empty_text_is_not_novel():
    assert NoveltyDetector().observe("   ") == ("", False)


def test_memory_is_bounded():
    d = NoveltyDetector(max_clusters=5)
    for i in range(50):
        d.observe(f"completely different message family {'x' * i} alpha{i} beta{i} gamma{i}")
    assert d.cluster_count <= 5


def test_state_round_trips_as_plain_json(tmp_path):
    path = tmp_path / "novelty.json"
    d = NoveltyDetector(state_path=path)
    d.observe("RuntimeError: NCCL error: unhandled system error")
    d.observe("RuntimeError: NCCL error: unhandled system error")
    d.observe("ValueError: No available memory for the cache blocks.")
    d.save()
    data = json.loads(path.read_text())  # plain JSON, no pickle
    assert data["version"] == 1
    assert {c["template"] for c in data["clusters"]} == {
        "RuntimeError: NCCL error: unhandled system error",
        "ValueError: No available memory for the cache blocks.",
    }
    again = NoveltyDetector(state_path=path)
    assert again.templates() == d.templates()
    _, novel = again.observe("RuntimeError: NCCL error: unhandled system error")
    assert novel is False


def test_bad_state_file_is_refused(tmp_path):
    path = tmp_path / "novelty.json"
    path.write_text(json.dumps({"version": 99}))
    with pytest.raises(ValueError):
        NoveltyDetector(state_path=path)


def test_rejects_zero_capacity():
    with pytest.raises(ValueError):
        NoveltyDetector(max_clusters=0)
