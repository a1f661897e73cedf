"""The same real log gives the same verdict whatever envelope carried it: raw text, Docker
json-file, CRI, Fluent Bit records with Kubernetes metadata (as files read by the CLI)."""

from __future__ import annotations

import json

import pytest

from service.classify.engine import Classifier
from service.classify.rulebook import RuleBook
from service.offline.report import classify_records
from service.sources.files import read_file
from tests.conftest import CORPUS

RB = RuleBook()
CASES = [
    "real-cpu-kv-cache-too-small",
    "real-cpu-worker-killed-while-serving",
    "real-cpu-healthy-serving-prefix-caching-sigterm",
    "gh-gpustack-2691-error-803-raw-traceback",
    "gh-llmd-352-nccl-dev-shm-no-space",
]
POD = {
    "pod_name": "qwen-7d9f8c6b5d-x2x4z",
    "namespace_name": "llm",
    "container_name": "vllm",
    "docker_id": "a" * 64,
    "host": "gpu-node-7",
    "container_image": "vllm/vllm-openai:v0.11.0",
    "labels": {"app": "qwen"},
}


def wrap(line: str, fmt: str, i: int) -> str:
    ts = f"2026-12-02T14:{i // 3600 % 60:02d}:{i // 60 % 60:02d}.{i % 1000:03d}000000Z"
    if fmt == "docker":
        return json.dumps({"log": line + "\n", "stream": "stdout", "time": ts})
    if fmt == "cri":
        return f"{ts} stdout F {line}"
    return json.dumps({"time": ts, "stream": "stdout", "_p": "F", "log": line, "kubernetes": POD})


def verdict(path: str) -> tuple:
    (rep,) = classify_records(read_file(path), Classifier(RB))
    crit = [i for i in rep["incidents"] if i["severity"] == "critical"]
    return (crit[0]["category"], crit[0]["stage"]) if crit else ("healthy", None)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("fmt", ["docker", "cri", "fluent"])
def test_every_envelope_gives_the_raw_verdict(tmp_path, case: str, fmt: str) -> None:
    raw = (CORPUS / f"{case}.log").read_text(encoding="utf-8", errors="replace").splitlines()
    wrapped = tmp_path / f"{case}.{fmt}.log"
    wrapped.write_text("\n".join(wrap(t, fmt, i) for i, t in enumerate(raw)) + "\n")
    assert verdict(str(wrapped)) == verdict(str(CORPUS / f"{case}.log"))


def test_fluent_records_key_the_stream_by_pod_and_carry_facts(tmp_path) -> None:
    raw = (CORPUS / "real-cpu-kv-cache-too-small.log").read_text().splitlines()
    path = tmp_path / "fluent.log"
    path.write_text("\n".join(wrap(t, "fluent", i) for i, t in enumerate(raw)) + "\n")
    (rep,) = classify_records(read_file(str(path)), Classifier(RB))
    assert rep["stream"] == "llm/qwen-7d9f8c6b5d-x2x4z/vllm"
    assert rep["facts"]["image"] == "vllm/vllm-openai:v0.11.0"
    assert rep["facts"]["node"] == "gpu-node-7"
