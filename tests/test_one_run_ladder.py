"""One run's times per ladder (issue #28): a crash loop's ladder shows its latest failed start
only - every stage time and the "failed at" under it are that attempt's, never an earlier
attempt's (the first failure's time is said as such, and every attempt is in its table).

The incident page, after one pod failed the same way three times (a real capture, two minutes
apart); the paste page and ``vllm-sentinel classify --json`` on the real restart loop
captured as Docker keeps it (tests/fixtures/real/restart-loop-kv-cache.docker.log)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.app import web_app
from service.classify.rulebook import RuleBook
from service.cli import main
from tests.api_support import REAL, WRITE, close_context, json_array, make_context
from tests.e2e_support import fluent_bit_records

KV = REAL / "kv-cache-too-small.cri.log"
LOOP = REAL / "restart-loop-kv-cache.docker.log"
SHOWN = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC")


def epoch(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()


@pytest.fixture()
def client(tmp_path: Path) -> Iterator[TestClient]:
    ctx = make_context(tmp_path / "s.db", RuleBook())
    with TestClient(web_app(ctx), base_url="https://testserver") as c:
        yield c
    close_context(ctx)


def crash_loop(c: TestClient) -> dict[str, Any]:
    now = time.time()
    for k in range(3):  # the same pod fails the same way three times, 2 min apart
        recs = fluent_bit_records(KV, "llm-prod", "llama-0", node="gpu-a", end=now - 600 + 120 * k)
        r = c.post(
            "/ingest",
            content=json_array(recs),
            headers={**WRITE, "Content-Type": "application/json"},
        )
        assert r.status_code == 200, r.text
    (inc,) = c.get("/incidents", params={"severity": "critical"}).json()["items"]
    full: dict[str, Any] = c.get(f"/incidents/{inc['id']}").json()
    assert full["restarts"] == 2 and len(full["extra"]["attempts"]) == 3
    return full


def test_the_incident_page_ladder_is_the_latest_attempt_only(client: TestClient) -> None:
    inc = crash_loop(client)
    last = inc["extra"]["attempts"][-1]
    html = client.get(f"/ui/incidents/{inc['id']}").text
    section = html.split('id="ladder-h"', 1)[1].split("</section>", 1)[0]
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", section))
    first = f"the first failed at {datetime.fromtimestamp(int(inc['opened_at']), UTC):%Y-%m-%d %H:%M:%S} UTC"
    # every time the ladder block shows is the latest attempt's - its rungs and when it
    # failed - but the first failure's, named as such
    shown = [epoch(t) for t in SHOWN.findall(text.replace(first, ""))]
    assert len(shown) == 5, text  # four rungs and when it failed
    for t in shown:
        assert int(last["started"]) <= t <= int(last["failed"]), (t, last, text)
    assert shown[-1] == int(last["failed"])
    assert "Attempt 3 failed at" in text and first in text


def test_the_paste_page_and_the_cli_show_the_last_attempt_of_a_restart_loop(
    client: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["classify", "--json", "--no-model", str(LOOP)]) == 1
    (rep,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    (inc,) = rep["incidents"]
    last = inc["extra"]["attempts"][-1]
    assert len(inc["extra"]["attempts"]) == 3
    for stage, t in rep["timeline"].items():  # the CLI report's ladder: one run
        assert last["started"] <= t <= last["failed"], (stage, t, last)
    page = client.get("/ui/classify").text
    token = re.search(r'name="csrf" value="([^"]+)"', page)
    assert token
    html = client.post(
        "/ui/classify",
        data={"csrf": token.group(1), "format": "auto"},
        files={"file": (LOOP.name, LOOP.read_bytes(), "text/plain")},
    ).text
    ladder = html.split('class="ladder"', 1)[1].split("</ol>", 1)[0]
    times = [epoch(t) for t in SHOWN.findall(ladder)]
    assert len(times) == 4
    for t in times:
        assert int(last["started"]) <= t <= last["failed"], (t, last)
