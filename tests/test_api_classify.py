"""POST /classify on real logs: the same reports as ``vllm-sentinel classify --json``, the
labelled primary category, every accepted body shape, limits; nothing reaches the store."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.api import create_app
from service.api.routers import classify as classify_route
from service.classify.engine import Classifier
from service.classify.novelty import NoveltyDetector
from service.classify.rulebook import RuleBook
from service.offline.report import classify_records
from service.sources.files import read_file
from tests.api_support import CORPUS, REAL, close_context, label, make_context

# Real vLLM CPU captures (labels in tests/corpus/cases/real-cpu-<name>.json)
REAL_CASES = [
    "kv-cache-too-small",
    "worker-killed-while-serving",
    "model-unavailable-offline",
    "bad-unknown-cli-flag",
    "bad-dtype",
    "unsupported-cpu-attention-head-dim-16",
    "healthy-idle-sigint",
    "healthy-serving-prefix-caching-sigterm",
]
# One labelled public log per category
CORPUS_CASES = [
    "gh-gpustack-1254-v0-error-802",
    "gh-kserve-4722-nvml-not-found-unspecified",
    "gh-ocrflux-70-sm120-not-compatible",
    "gh-vllm-1738-v022-libcudart12-cu118-torch",
    "gh-ray-44533-vllm-nccl-internal-error-busid",
    "gh-aibrix-1433-nixl-ucx-mlx5-register-memory",
    "gh-gpustack-5509-ray-placement-group-waiting",
    "gh-dynamo-787-custom-allreduce-invalid-argument",
    "gh-vllm-28143-oom-weights-linear-create-weights",
    "gh-vllm-10439-compose-no-available-cache-blocks-v064",
    "gh-club3090-138-oom-runtime-worker-tp0",
    "gh-arcticinference-37-worker-killed-after-weights",
    "gh-gpustack-814-v06-tp3-heads-not-divisible",
    "gh-vllm-3963-v040-gated-repo-llama2",
    "gh-vllm-13332-v07-inspect-arch-subprocess-failed",
    "gh-eks-agentic-ai-v0190-tp4-l40s-healthy",
]


@pytest.fixture(scope="module")
def rb() -> RuleBook:
    return RuleBook()


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory, rb: RuleBook) -> Iterator[TestClient]:
    ctx = make_context(tmp_path_factory.mktemp("classify") / "s.db", rb)
    with TestClient(create_app(ctx)) as c:
        c.ctx = ctx  # type: ignore[attr-defined]
        yield c
    close_context(ctx)


def primary_label(body: dict) -> tuple[str, str]:
    p = body["primary"]
    return ("none", "healthy") if p is None else (p["tier"], p["category"])


def cli_reports(path: Path, rb: RuleBook, stream: str = "pasted") -> list[dict]:
    """What ``vllm-sentinel classify --json`` prints (one dict per line), round-tripped."""
    clf = Classifier(rb, novelty=NoveltyDetector())
    reps = classify_records(read_file(str(path), stream=stream), clf)
    return [json.loads(json.dumps(r, default=str)) for r in reps]


@pytest.mark.parametrize("name", REAL_CASES)
def test_real_capture_as_text_gets_its_labelled_category(
    client: TestClient, rb: RuleBook, name: str
) -> None:
    path = REAL / f"{name}.log"
    want = label(CORPUS / f"real-cpu-{name}.log")
    r = client.post("/classify", content=path.read_bytes(), headers={"Content-Type": "text/plain"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert primary_label(body) == (want["tier"], want["category"])
    assert body["reports"] == cli_reports(path, rb)


@pytest.mark.parametrize("name", REAL_CASES)
def test_real_cri_capture_as_json_gets_its_labelled_category(client: TestClient, name: str) -> None:
    want = label(CORPUS / f"real-cpu-{name}.log")
    log = (REAL / f"{name}.cri.log").read_text(encoding="utf-8", errors="replace")
    r = client.post("/classify", json={"log": log, "format": "cri", "stream": name})
    assert r.status_code == 200, r.text
    body = r.json()
    assert primary_label(body) == (want["tier"], want["category"])
    assert [rep["stream"] for rep in body["reports"]] == [name]


@pytest.mark.parametrize("name", CORPUS_CASES)
def test_labelled_corpus_log_gets_its_category(client: TestClient, rb: RuleBook, name: str) -> None:
    path = CORPUS / f"{name}.log"
    want = label(path)
    r = client.post("/classify", content=path.read_bytes())  # no Content-Type: sniffed
    assert r.status_code == 200, r.text
    body = r.json()
    assert primary_label(body) == (want["tier"], want["category"])
    if body["primary"] is not None:
        assert body["primary"]["stage"] == want["stage"]
    assert body["reports"] == cli_reports(path, rb)


def test_the_report_shape_is_the_cli_json_shape(client: TestClient) -> None:
    r = client.post("/classify", content=(REAL / "kv-cache-too-small.log").read_bytes())
    rep = r.json()["reports"][0]
    assert set(rep) == {
        "stream",
        "status",
        "stage",
        "incidents",
        "facts",
        "timeline",
        "meta",
        "warnings",
        "stopped",
        "lines",
    }
    inc = rep["incidents"][0]
    for key in (
        "id",
        "status",
        "severity",
        "tier",
        "category",
        "stage",
        "confidence",
        "method",
        "rule",
        "line",
        "remediation",
        "evidence",
        "related",
        "restarts",
    ):
        assert key in inc
    assert rep["facts"]["vllm_version"] == "0.32.0"


def test_gzip_bodies_are_accepted(client: TestClient) -> None:
    raw = (REAL / "kv-cache-too-small.log").read_bytes()
    for headers in ({"Content-Encoding": "gzip"}, {}):  # declared, or sniffed by magic
        r = client.post(
            "/classify",
            content=gzip.compress(raw),
            headers={"Content-Type": "text/plain", **headers},
        )
        assert r.status_code == 200, r.text
        assert primary_label(r.json()) == ("capacity", "oom_kv_cache")


def test_classify_never_touches_the_store(client: TestClient) -> None:
    before = client.get("/stats").json()
    for name in ("kv-cache-too-small", "worker-killed-while-serving"):
        client.post("/classify", content=(REAL / f"{name}.log").read_bytes())
    assert client.get("/stats").json() == before
    assert client.get("/incidents").json()["items"] == []


def test_each_request_gets_a_fresh_classifier(client: TestClient) -> None:
    """A second paste of the same log is not a 'restart' of the first."""
    raw = (REAL / "kv-cache-too-small.log").read_bytes()
    a = client.post("/classify", content=raw).json()
    b = client.post("/classify", content=raw).json()
    assert a == b
    assert a["primary"]["restarts"] == 0


def test_a_healthy_log_has_no_primary(client: TestClient) -> None:
    r = client.post("/classify", json={"log": (REAL / "healthy-idle-sigint.log").read_text()})
    assert r.status_code == 200
    body = r.json()
    assert body["primary"] is None
    assert all(i["severity"] != "critical" for i in body["reports"][0]["incidents"])


@pytest.mark.parametrize(
    ("kwargs", "status"),
    [
        ({"content": b""}, 400),
        ({"content": b"  \n\n"}, 400),
        ({"json": {"log": ""}}, 400),
        ({"json": {"format": "auto"}}, 422),
        ({"json": {"log": "x", "format": "syslog"}}, 422),
        ({"json": {"log": "x", "colour": "red"}}, 422),
        ({"content": b"{not json", "headers": {"Content-Type": "application/json"}}, 422),
        ({"content": b"\x1f\x8bnot gzip", "headers": {"Content-Encoding": "gzip"}}, 400),
        ({"content": b"x", "headers": {"Content-Encoding": "br"}}, 415),
    ],
)
def test_bad_bodies(client: TestClient, kwargs: dict, status: int) -> None:
    r = client.post("/classify", **kwargs)
    assert r.status_code == status, r.text
    assert "detail" in r.json()


def test_bodies_over_the_limit_are_413(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(classify_route, "MAX_BODY", 4096)
    big = (REAL / "kv-cache-too-small.log").read_bytes()
    assert len(big) > 4096
    r = client.post("/classify", content=big)
    assert r.status_code == 413 and "4096" in r.json()["detail"]
    # a gzip body that expands beyond the limit is refused as well
    r = client.post("/classify", content=gzip.compress(big), headers={"Content-Encoding": "gzip"})
    assert r.status_code == 413
    # without Content-Length (chunked upload) the bound holds while streaming
    r = client.post("/classify", content=iter([big[:3000], big[3000:]]))
    assert r.status_code == 413


def test_the_default_limit_is_20_mib() -> None:
    assert classify_route.MAX_BODY == 20 * 1024 * 1024
