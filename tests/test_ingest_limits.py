"""POST /ingest under abuse: gzip bombs refused while inflating with bounded memory, the
process-wide decompression budget, the record cap, tag bounds, foreign content types, blank
tokens, and reject logs that stay small whatever the input."""

from __future__ import annotations

import gzip
import json
import logging
import tracemalloc
import zlib
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from service import ratelog
from service.api import create_app
from service.api.routers import ingest as ingest_route
from service.classify.rulebook import RuleBook
from service.config import ApiSettings, Settings
from service.ingest.bounds import MAX_TAG
from service.ingest.budget import DECOMPRESSED, Lease
from service.netguard import InsecureConfigError, check_auth_config
from service.sources.http.endpoint import HttpEndpoint
from tests.api_support import (
    REAL,
    WRITE,
    close_context,
    endpoint_in,
    fluentbit_records,
    kube,
    make_context,
)
from tests.ingest_samples import rejects

KV = REAL / "kv-cache-too-small.cri.log"
MiB = 1 << 20


@pytest.fixture(scope="module")
def rb() -> RuleBook:
    return RuleBook()


@pytest.fixture()
def ctx(tmp_path: Path, rb: RuleBook) -> Iterator:
    c = make_context(tmp_path / "s.db", rb)
    yield c
    close_context(c)


@pytest.fixture()
def client(ctx) -> Iterator[TestClient]:
    with TestClient(create_app(ctx)) as c:
        yield c


def http_endpoint(client: TestClient) -> HttpEndpoint:
    """The app's ``POST /ingest`` endpoint, whose limits a test lowers."""
    return endpoint_in(client.app.state.ctx, ingest_route.SOURCE)


def post(
    client: TestClient, body: bytes, content_type: str | None = "application/json", **headers: str
):
    h = {**WRITE, **headers}
    if content_type is not None:
        h["Content-Type"] = content_type
    return client.post("/ingest", content=body, headers=h)


def bomb(mib: int) -> bytes:
    """A JSON body of ``mib`` MiB of blanks, gzip'd to about 1 KiB per MiB."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    blanks = b" " * MiB
    return (
        z.compress(b"[")
        + b"".join(z.compress(blanks) for _ in range(mib))
        + z.compress(b"]")
        + z.flush()
    )


# ---- decompression budget -----------------------------------------------------------------
def test_a_gzip_bomb_is_refused_while_inflating_with_bounded_memory(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    limit = 4 * MiB
    monkeypatch.setattr(http_endpoint(client), "max_decompressed", limit)
    body = bomb(40)
    assert len(body) < 64 * 1024 and len(gzip.decompress(body)) > 10 * limit
    before = rejects("http", "decompressed_too_large")
    used = DECOMPRESSED.used
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        r = post(client, body, **{"Content-Encoding": "gzip"})
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert r.status_code == 413
    assert rejects("http", "decompressed_too_large") == before + 1
    # inflating the whole body would take 40 MiB; refused as soon as it passed 4 MiB
    assert peak - base < 2 * limit, f"peak {(peak - base) / MiB:.1f} MiB"
    assert current - base < MiB  # and freed at once, not when the exception is collected
    assert DECOMPRESSED.used == used  # the lease went back to the global budget


def test_a_body_within_the_limit_still_inflates(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http_endpoint(client), "max_decompressed", 4 * MiB)
    records = fluentbit_records(KV, kube("ns", "gz"))
    body = gzip.compress(json.dumps(records).encode())
    r = post(client, body, **{"Content-Encoding": "gzip"})
    assert r.status_code == 200 and r.json()["accepted"] == len(records)


def test_a_spent_global_budget_is_503_and_retry_works(client: TestClient) -> None:
    body = gzip.compress(b"[" + b" " * 200_000 + b"]")
    hog = Lease(DECOMPRESSED.limit)
    hog.hold(DECOMPRESSED.limit - DECOMPRESSED.used - 50_000)  # other requests hold the rest
    before = rejects("http", "memory_budget")
    try:
        r = post(client, body, **{"Content-Encoding": "gzip"})
        assert r.status_code == 503 and r.headers["Retry-After"] == "5"
        assert rejects("http", "memory_budget") == before + 1
    finally:
        hog.release()
    assert post(client, body, **{"Content-Encoding": "gzip"}).status_code == 204


# ---- record cap ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("content_type", "make"),
    [
        ("text/plain", lambda n: b"line\n" * n),
        ("application/x-ndjson", lambda n: b'{"log": "x"}\n' * n),
        ("application/json", lambda n: json.dumps([{"log": "x"}] * n).encode()),
        ("application/msgpack", lambda n: msgpack.packb([1, {"log": "x"}]) * n),
    ],
)
def test_a_body_may_expand_to_a_bounded_number_of_records(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, content_type: str, make
) -> None:
    monkeypatch.setattr(ingest_route, "MAX_RECORDS", 1000)
    before = rejects("http", "too_many_records")
    r = post(client, gzip.compress(make(1001)), content_type, **{"Content-Encoding": "gzip"})
    assert r.status_code == 413 and "records" in r.text
    assert rejects("http", "too_many_records") == before + 1
    assert post(client, make(1000), content_type).json()["accepted"] == 1000


# ---- tags ---------------------------------------------------------------------------------
def test_a_tag_over_the_bound_is_400_and_counted(client: TestClient) -> None:
    body = json.dumps([{"log": "x"}]).encode()
    before = rejects("http", "tag_too_long")
    assert post(client, body, **{"X-Fluent-Tag": "t" * (MAX_TAG + 1)}).status_code == 400
    r = client.post(
        "/ingest",
        params={"tag": "t" * (MAX_TAG + 1)},
        content=body,
        headers={**WRITE, "Content-Type": "application/json"},
    )
    assert r.status_code == 400
    assert rejects("http", "tag_too_long") == before + 2
    r = post(client, body, **{"X-Fluent-Tag": "t" * MAX_TAG})
    assert r.status_code == 200
    assert client.get("/streams/" + "t" * MAX_TAG).status_code == 200


def test_a_kubelet_tag_of_the_longest_valid_names_fits() -> None:
    tag = (
        "kube.var.log.containers."
        + "p" * 253
        + "_"
        + "n" * 63
        + "_"
        + "c" * 63
        + "-"
        + "0" * 64
        + ".log"
    )
    assert len(tag) <= MAX_TAG


# ---- content types ------------------------------------------------------------------------
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b"junk line one\njunk line two\n", "application/octet-stream"),
        (json.dumps([{"log": "x"}]).encode(), "application/octet-stream"),
        (PNG, "image/png"),
        (b"a=1&b=2", "application/x-www-form-urlencoded"),
        (b"junk line one\njunk line two\n", None),
        (PNG, None),
    ],
)
def test_junk_or_a_foreign_content_type_is_415(
    client: TestClient, body: bytes, content_type: str | None
) -> None:
    before = rejects("http", "unsupported_media_type")
    r = post(client, body, content_type)
    assert r.status_code == 415, r.text
    assert rejects("http", "unsupported_media_type") == before + 1


def test_the_collectors_types_are_still_read(client: TestClient) -> None:
    line = {"log": "INFO hello"}
    assert post(client, b"INFO hello\n", "text/plain; charset=utf-8").status_code == 200
    assert post(client, json.dumps([line]).encode(), "application/json").status_code == 200
    assert post(client, json.dumps(line).encode(), "application/x-ndjson").status_code == 200
    assert post(client, msgpack.packb([1, line]), "application/msgpack").status_code == 200
    assert post(client, json.dumps([line]).encode(), None).status_code == 200  # sniffed
    assert post(client, msgpack.packb([1, line]), None).status_code == 200


# ---- blank tokens ---------------------------------------------------------------------------
@pytest.mark.parametrize("token", ["", " ", "   \t", "\n"])
def test_a_blank_token_is_refused_by_the_settings(
    token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValidationError):
        ApiSettings(token=token)
    with pytest.raises(ValidationError):
        ApiSettings(read_token=token)
    monkeypatch.setenv("SENTINEL_API__TOKEN", token)
    with pytest.raises(ValidationError):
        Settings()


def test_a_blank_token_that_got_past_validation_locks_rather_than_opens(ctx) -> None:
    blank = ApiSettings.model_construct(
        host="127.0.0.1", port=8080, token="   ", read_token=None, allow_unauthenticated=False
    )
    with pytest.raises(InsecureConfigError):
        check_auth_config(blank)
    ctx.settings.api = blank
    with pytest.raises(InsecureConfigError):
        create_app(ctx)
    ctx.settings.api = ApiSettings(token="real-token")
    app = create_app(ctx)
    ctx.settings.api = blank  # changed at run time, after the start-up check
    body = json.dumps([{"log": "x"}]).encode()
    with TestClient(app) as c:
        for auth in ("Bearer    ", "Bearer \t", "Bearer", "Bearer x", "Bearer real-token"):
            r = c.post(
                "/ingest",
                content=body,
                headers={"Content-Type": "application/json", "Authorization": auth},
            )
            assert r.status_code == 401, auth
        assert (
            c.post(
                "/ingest", content=body, headers={"Content-Type": "application/json"}
            ).status_code
            == 401
        )


def test_a_whitespace_credential_never_passes(client: TestClient) -> None:
    body = json.dumps([{"log": "x"}]).encode()
    for auth in ("Bearer  \t ", "Bearer   "):
        r = client.post(
            "/ingest",
            content=body,
            headers={"Content-Type": "application/json", "Authorization": auth},
        )
        assert r.status_code == 401


# ---- bounded reject logs ------------------------------------------------------------------
class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_rate_limited_log_writes_one_line_per_interval_with_the_suppressed_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    limited = ratelog.RateLimitedLog(
        "test.ratelog", limiter=ratelog.RateLimiter(10.0, clock=clock, max_keys=3)
    )
    with caplog.at_level(logging.WARNING, logger="test.ratelog"):
        for _ in range(50):
            limited.warning(("src", "bad"), "rejected %s", "x" * 5000 + "\n" + "y")
        clock.now += 10.0
        limited.warning(("src", "bad"), "rejected %s", "again")
        limited.warning(("src", "other"), "rejected %s", "other key")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3
    assert "\n" not in lines[0] and len(lines[0]) < 160 and "(5002 chars)" in lines[0]
    assert "49 more like this suppressed" in lines[1]
    assert lines[2] == "rejected other key"
    for i in range(10):  # the key table stays bounded
        limited.warning(("k", i), "k")
    assert len(limited.limiter._keys) == 3


def test_a_flood_of_rejects_logs_a_bounded_amount(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    ratelog.REJECTS_LOG.limiter._keys.clear()
    before = rejects("http", "unsupported_media_type")
    junk = b"\x00junk\n" * 2000
    with caplog.at_level(logging.WARNING, logger="vllm_sentinel.rejects"):
        for _ in range(30):
            assert post(client, junk, "application/octet-stream").status_code == 415
        for _ in range(30):  # the shared ratelog.reject (envelope, other sources) as well
            ratelog.reject("http", "invalid_utf8", "\udcff" * 10_000)
    assert rejects("http", "unsupported_media_type") == before + 30
    lines = [r.getMessage() for r in caplog.records if r.name == "vllm_sentinel.rejects"]
    assert len(lines) == 2, lines
    assert all(len(line) < 300 and "\n" not in line for line in lines)
    assert sum(map(len, lines)) < len(junk) // 20
