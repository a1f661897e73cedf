"""Binary input, one rule everywhere (issue #28): the paste page, ``POST /classify``,
``POST /ingest`` and ``vllm-sentinel classify`` agree (service/ingest/junk.py).

* a real capture with random bytes spliced into it is a log: its junk lines are dropped and
  counted as rejects, its real failure (the KV cache too small) is reported by all four;
* a file that is nothing but binary (an executable, random bytes) is refused with one clear
  line by all four;
* the paste page never shows a literal ``None``.
"""

from __future__ import annotations

import random
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.app import web_app
from service.classify.rulebook import RuleBook
from service.cli import main
from tests.api_support import REAL, WRITE, close_context, make_context
from tests.ingest_samples import rejects

CAPTURE = REAL / "kv-cache-too-small.log"
EXECUTABLE = Path(sys.executable).resolve()


def spliced() -> bytes:
    """The real capture with 20 KB of random bytes after its 10th line (inside the first 8 KB,
    where a sniff of the file's head sees mostly junk)."""
    log = CAPTURE.read_bytes()
    cut = 0
    for _ in range(10):
        cut = log.index(b"\n", cut) + 1
    junk = random.Random(28).randbytes(20_000)
    return log[:cut] + junk + b"\n" + log[cut:]


def random_bytes() -> bytes:
    return random.Random(300).randbytes(300 * 1024)


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    ctx = make_context(tmp_path_factory.mktemp("binary") / "sentinel.db", RuleBook())
    with TestClient(web_app(ctx), base_url="https://testserver") as c:
        yield c
    close_context(ctx)


def paste(c: TestClient, name: str, data: bytes) -> tuple[int, str]:
    page = c.get("/ui/classify").text
    token = re.search(r'name="csrf" value="([^"]+)"', page)
    assert token
    r = c.post(
        "/ui/classify",
        data={"csrf": token.group(1), "format": "auto"},
        files={"file": (name, data, "application/octet-stream")},
    )
    return r.status_code, r.text


def shown(html: str) -> str:
    """The page's visible text (tags dropped, blanks squeezed)."""
    main_part = html[html.index("<main") :]
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", main_part))


# ---- a real log with a binary chunk in the middle -----------------------------------------
def test_the_cli_reports_the_failure_of_a_log_with_a_binary_chunk(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "pod.log"
    log.write_bytes(spliced())
    before = rejects("file", "binary")
    assert main(["classify", "--no-model", str(log)]) == 1  # the open critical incident
    out = capsys.readouterr().out
    assert "capacity/oom_kv_cache at kv_cache_init" in out
    assert rejects("file", "binary") > before  # the junk lines, counted


def test_the_api_and_the_paste_page_report_the_same_failure(client: TestClient) -> None:
    data = spliced()
    r = client.post("/classify", content=data, headers={"Content-Type": "text/plain"})
    assert r.status_code == 200, r.text
    assert r.json()["primary"]["category"] == "oom_kv_cache"
    status, html = paste(client, "pod.log", data)
    assert status == 200
    assert "capacity / oom_kv_cache" in shown(html)


def test_ingest_counts_the_junk_lines_as_rejects_and_stores_the_failure(
    client: TestClient,
) -> None:
    before = rejects("http", "binary")
    r = client.post(
        "/ingest?tag=spliced",
        content=spliced(),
        headers={**WRITE, "Content-Type": "text/plain"},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["rejected"] > 50 and body["rejected"] == rejects("http", "binary") - before
    assert body["accepted"] < 180  # the capture's 166 lines and a few short fragments
    found = client.get("/incidents", params={"stream": "spliced"}).json()["items"]
    assert [i["category"] for i in found if i["severity"] == "critical"] == ["oom_kv_cache"]


# ---- nothing but binary -------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, data, why",
    [
        ("python", EXECUTABLE.read_bytes(), "is an executable, not a log"),
        ("random.bin", random_bytes(), "is a binary file, not a log"),
    ],
)
def test_a_binary_file_is_refused_with_one_line_everywhere(
    client: TestClient,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    data: bytes,
    why: str,
) -> None:
    data = data[: 20 << 20]  # within POST /classify's limit
    path = tmp_path / name
    path.write_bytes(data)
    assert main(["classify", "--no-model", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and why in err

    r = client.post("/classify", content=data, headers={"Content-Type": "text/plain"})
    assert r.status_code == 400 and why in r.json()["detail"]

    status, html = paste(client, name, data)
    text = shown(html)
    assert status == 400 and f"{name} {why}" in text
    assert "None" not in text and 'id="result"' not in html

    r = client.post(
        "/ingest?tag=binary",
        content=data[: 1 << 20],
        headers={**WRITE, "Content-Type": "text/plain"},
    )
    assert r.status_code == 400 and why in r.json()["detail"]["message"]
    assert r.json()["detail"]["accepted"] == 0


def test_a_log_that_ends_before_any_stage_never_shows_none(client: TestClient) -> None:
    # no start-up line: nothing says where it stopped (another program's log reads the same)
    status, html = paste(client, "short.log", b"INFO starting the server\nINFO still here\n")
    assert status == 200
    text = shown(html)
    assert "mid-startup" not in text and "None" not in text


def test_a_log_that_ends_mid_startup_names_the_stage(client: TestClient) -> None:
    log = (
        b"INFO 05-06 10:00:00 [api_server.py:1043] vLLM API server version 0.8.5\n"
        b"INFO 05-06 10:00:09 [loader.py:458] Loading weights took 3.10 seconds\n"
    )
    status, html = paste(client, "cut.log", log)
    assert status == 200
    text = shown(html)
    assert "The log ends mid-startup in model_load" in text and "None" not in text


# ---- a log over the paste page's limit ----------------------------------------------------
def test_an_upload_over_the_limit_gets_a_page_saying_how_to_send_it(client: TestClient) -> None:
    """21 MiB to the paste page: a dashboard page (never the API's JSON) with the limit and
    the two ways to classify a larger log."""
    big = (CAPTURE.read_bytes() * (21 * 1024 * 1024 // CAPTURE.stat().st_size + 1))[: 21 << 20]
    status, html = paste(client, "big.log", big)
    assert status == 413
    assert html.lstrip().startswith("<!doctype html>") or "<html" in html[:200]
    text = shown(html)
    assert "This log is larger than 20 MiB" in text
    assert "vllm-sentinel classify pod.log" in text and "POST /ingest" in text
    assert 'name="csrf"' in html  # the form is there to paste a part of it
