"""The dashboard (``/ui/``) over HTTP, without a browser: pages and their data, the read and
write rules of the API applied through the login cookie, CSRF, silences and the paste form,
``/`` and ``/docs`` served locally, and alert links pointing at the incident's page.
(tests/test_ui_browser.py drives the same pages in a real Chromium.)"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from fastapi.testclient import TestClient
from markupsafe import escape

from service.app import web_app
from service.classify.rulebook import RuleBook
from service.notify.alert import Alert
from tests.api_support import (
    READ_TOKEN,
    REAL,
    WRITE,
    WRITE_TOKEN,
    close_context,
    fluentbit_records,
    json_array,
    kube,
    make_context,
)
from tests.secrets_support import leaked, secret_lines

KV = REAL / "kv-cache-too-small.cri.log"
PORT = REAL / "port-in-use.cri.log"


def ingest(c: TestClient, log: Path, ns: str, pod: str, node: str = "gpu-node-1") -> None:
    r = c.post(
        "/ingest",
        content=json_array(fluentbit_records(log, kube(ns, pod, node=node))),
        headers={**WRITE, "Content-Type": "application/json"},
    )
    assert r.status_code == 200, r.text


def csrf_of(html: str) -> str:
    m = re.search(r'name="csrf" value="([^"]+)"', html)
    assert m, "no CSRF field in the page"
    return m.group(1)


def login(c: TestClient, token: str) -> None:
    page = c.get("/ui/login")
    r = c.post(
        "/ui/login",
        data={"token": token, "csrf": csrf_of(page.text), "next": "/ui/"},
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    ctx = make_context(tmp_path_factory.mktemp("ui") / "sentinel.db", RuleBook())
    with TestClient(web_app(ctx), base_url="https://testserver") as c:
        ingest(c, KV, "llm-prod", "llama-0", "gpu-a")
        ingest(c, PORT, "llm-dev", "qwen-0", "gpu-b")
        yield c
    close_context(ctx)


@pytest.fixture()
def fresh(tmp_path: Path) -> Iterator[TestClient]:
    ctx = make_context(tmp_path / "sentinel.db", RuleBook())
    with TestClient(web_app(ctx), base_url="https://testserver") as c:
        ingest(c, KV, "llm-prod", "llama-0")
        yield c
    close_context(ctx)


def critical(c: TestClient, **params: str) -> list[dict]:
    return c.get("/incidents", params={"severity": "critical", **params}).json()["items"]


# ---- pages --------------------------------------------------------------------------------
def test_root_redirects_to_the_dashboard_and_every_page_renders(client: TestClient) -> None:
    r = client.get("/", follow_redirects=False)
    assert r.status_code == 307 and r.headers["location"] == "/ui/"
    for path in (
        "/ui/",
        "/ui/incidents",
        "/ui/fleets",
        "/ui/streams",
        "/ui/silences",
        "/ui/classify",
        "/ui/login",
    ):
        r = client.get(path)
        assert r.status_code == 200, path
        assert r.headers["content-type"].startswith("text/html")
        assert "script-src 'self'" in r.headers["content-security-policy"]
        assert '<html lang="en">' in r.text and 'id="main"' in r.text
        assert "http://" not in r.text.split("<body", 1)[0]  # nothing loaded from elsewhere


def test_list_filters_and_counts(client: TestClient) -> None:
    page = client.get("/ui/incidents").text
    kv = critical(client, namespace="llm-prod")[0]
    port = critical(client, namespace="llm-dev")[0]
    assert f'/ui/incidents/{kv["id"]}"' in page and f'/ui/incidents/{port["id"]}"' in page
    tiered = client.get("/ui/incidents", params={"tier": kv["tier"]}).text
    assert kv["id"] in tiered and port["id"] not in tiered
    assert f'class="chip tier-{kv["tier"]}"' in tiered
    by_node = client.get("/ui/incidents", params={"node": "gpu-b"}).text
    assert port["id"] in by_node and kv["id"] not in by_node
    future = client.get("/ui/incidents", params={"since": str(time.time() + 3600)}).text
    assert "No incident matches these filters" in future
    bad = client.get("/ui/incidents", params={"tier": "nonsense"})
    assert bad.status_code == 200 and "unknown tier" in bad.text
    frag = client.get("/ui/incidents", params={"fragment": "1", "namespace": "llm-dev"}).text
    assert "<html" not in frag and port["id"] in frag and kv["id"] not in frag


def test_detail_shows_the_whole_root_cause_and_the_failed_rung(client: TestClient) -> None:
    inc = critical(client, namespace="llm-prod")[0]
    full = client.get(f"/incidents/{inc['id']}").json()
    html = client.get(f"/ui/incidents/{inc['id']}").text
    assert len(full["line"]) > 300 and str(escape(full["line"])) in html  # whole
    failed = re.findall(
        r'class="rung rung-failed" aria-current="step" data-stage="([a-z_]+)"', html
    )
    assert failed == [full["stage"]] == ["kv_cache_init"]
    assert html.count("rung rung-passed") >= 2  # cuda_init ... model_load
    assert "Startup ladder" in html and "Playbook" in html and "Notifications" in html
    assert client.get("/ui/incidents/nope").status_code == 404


def test_a_config_error_reads_as_config_and_its_root_cause_without_the_prefix(
    tmp_path: Path,
) -> None:
    """#22: "CUDA init FAILED HERE" for a config error read as a GPU problem; the root cause
    cell and evidence were half prefix (``(APIServer pid=...) ERROR 12-02 ... [x.py:126]``)."""
    ctx = make_context(tmp_path / "sentinel.db", RuleBook())
    with TestClient(web_app(ctx), base_url="https://testserver") as c:
        ingest(c, REAL / "trust-remote-code-required.cri.log", "llm-prod", "trc-0")
        (inc,) = critical(c)
        assert (inc["stage"], inc["category"]) == ("cuda_init", "config_error")
        assert inc["line"].startswith("(APIServer pid=")
        html = c.get(f"/ui/incidents/{inc['id']}").text
        listing = c.get("/ui/incidents").text
    close_context(ctx)
    rung = re.search(r'class="rung rung-failed"[^>]*data-stage="cuda_init".*?</li>', html, re.S)
    assert rung and "Config / CUDA init" in rung.group(0)
    m = re.search(r'<pre class="rootcause"[^>]*>([^<]*)</pre>', html)
    assert m and m.group(1).startswith("Error parsing config"), m
    message = m.group(1)
    assert str(escape(inc["line"])) in html  # the whole line stays (its title)
    ev = re.search(r'<pre class="evidence".*?</pre>', html, re.S)
    assert ev and "<mark>" + message in ev.group(0) and "pid=" not in ev.group(0)
    cell = re.search(
        rf'/ui/incidents/{inc["id"]}".*?<td class="line-cell"><code[^>]*>([^<]*)', listing, re.S
    )
    assert cell and cell.group(1).startswith("Error parsing config")


def test_a_crash_loop_shows_its_attempts(tmp_path: Path) -> None:
    from tests.e2e_support import fluent_bit_records

    ctx = make_context(tmp_path / "s.db", RuleBook())
    try:
        with TestClient(web_app(ctx), base_url="https://testserver") as c:
            now = time.time()
            for k in range(3):  # the same pod fails the same way three times, 2 min apart
                recs = fluent_bit_records(
                    KV, "llm-prod", "llama-0", node="gpu-a", end=now - 600 + 120 * k
                )
                r = c.post(
                    "/ingest",
                    content=json_array(recs),
                    headers={**WRITE, "Content-Type": "application/json"},
                )
                assert r.status_code == 200, r.text
            (inc,) = critical(c)
            assert inc["restarts"] == 2 and inc["extra"]["crash_loop"]
            html = c.get(f"/ui/incidents/{inc['id']}").text
            assert '<span class="badge crash">crash loop</span>' in html
            assert "restarting will not help" in html
            table = html.split('<table class="data attempts">', 1)[1].split("</table>", 1)[0]
            assert table.count("<tr><td>") == 3 and "llama-0" in table
            assert '<span class="restarts">2 restarts</span>' in c.get("/ui/incidents").text
    finally:
        close_context(ctx)


def test_fleets_streams_and_silences_pages_show_the_store(client: TestClient) -> None:
    streams = client.get("/ui/streams").text
    assert "llm-prod/llama-0/vllm" in streams and "st-failed" in streams
    failed = client.get("/ui/streams", params={"state": "failed"}).text
    assert "llm-dev/qwen-0/vllm" in failed
    assert "No fleet incident" in client.get("/ui/fleets").text
    inc = critical(client, namespace="llm-prod")[0]
    form = client.get("/ui/silences", params={"incident": inc["id"]}).text
    assert 'id="use-category" name="use_category" value="1" checked' in form
    assert f'value="{inc["category"]}"' in form and 'value="llm-prod"' in form


def test_docs_are_served_from_vendored_assets(client: TestClient) -> None:
    html = client.get("/docs").text
    assert "cdn" not in html.lower()
    assert "/ui/static/swagger/swagger-ui-bundle.js" in html
    js = client.get("/ui/static/swagger/swagger-ui-bundle.js")
    assert js.status_code == 200 and len(js.content) > 500_000
    assert client.get("/ui/static/swagger/swagger-ui.css").status_code == 200


# ---- auth ---------------------------------------------------------------------------------
def test_writes_need_the_write_token_and_a_csrf_token(fresh: TestClient) -> None:
    inc = critical(fresh)[0]
    page = fresh.get(f"/ui/incidents/{inc['id']}")
    token = csrf_of(page.text)
    url = f"/ui/incidents/{inc['id']}/resolve"
    r = fresh.post(url, data={"reason": "r", "csrf": token}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/ui/login?")
    assert "why=write" in r.headers["location"]
    login(fresh, WRITE_TOKEN)
    cookie = next(c for c in fresh.cookies.jar if c.name == "sentinel_token")
    assert cookie.secure and cookie.path == "/ui" and cookie.has_nonstandard_attr("HttpOnly")
    assert fresh.post(url, data={"reason": "r", "csrf": "forged" * 5}).status_code == 403
    r = fresh.post(
        url, data={"reason": "r", "csrf": token}, headers={"Origin": "https://evil.example"}
    )
    assert r.status_code == 403
    assert fresh.get(f"/incidents/{inc['id']}").json()["status"] == "open"
    r = fresh.post(url, data={"reason": "raised KV space", "csrf": token}, follow_redirects=False)
    assert r.status_code == 303 and "done=resolved" in r.headers["location"]
    after = fresh.get(f"/incidents/{inc['id']}").json()
    assert after["status"] == "resolved" and after["resolution"] == "raised KV space"
    r = fresh.post(
        f"/ui/incidents/{inc['id']}/feedback",
        follow_redirects=False,
        data={
            "verdict": "wrong",
            "category": "oom_runtime",
            "comment": "was runtime",
            "csrf": token,
        },
    )
    assert r.status_code == 303
    (fb,) = fresh.get("/feedback").json()
    assert (fb["correct"], fb["category"], fb["comment"]) == (False, "oom_runtime", "was runtime")


def test_reads_follow_the_read_token_rule(tmp_path: Path) -> None:
    ctx = make_context(tmp_path / "s.db", RuleBook(), read_token=READ_TOKEN)
    try:
        with TestClient(web_app(ctx), base_url="https://testserver") as c:
            ingest(c, KV, "llm-prod", "llama-0")
            r = c.get("/ui/incidents?tier=capacity", follow_redirects=False)
            assert r.status_code == 303
            assert r.headers["location"] == "/ui/login?next=%2Fui%2Fincidents%3Ftier%3Dcapacity"
            assert c.get("/ui/incidents?fragment=1").status_code == 401
            page = c.get("/ui/login")
            bad = c.post("/ui/login", data={"token": "wrong", "csrf": csrf_of(page.text)})
            assert bad.status_code == 401 and "not accepted" in bad.text
            r = c.post(
                "/ui/login",
                follow_redirects=False,
                data={
                    "token": READ_TOKEN,
                    "csrf": csrf_of(page.text),
                    "next": "/ui/incidents?tier=capacity",
                },
            )
            assert r.status_code == 303 and r.headers["location"] == "/ui/incidents?tier=capacity"
            assert "oom_kv_cache" in c.get("/ui/incidents").text
            inc = c.get("/incidents", headers=WRITE).json()["items"][0]
            page = c.get(f"/ui/incidents/{inc['id']}")
            assert "read only" in page.text
            r = c.post(
                f"/ui/incidents/{inc['id']}/resolve",
                follow_redirects=False,
                data={"reason": "x", "csrf": csrf_of(page.text)},
            )
            assert r.status_code == 303 and "why=write" in r.headers["location"]
            # an open redirect is not possible through ?next=
            r = c.post(
                "/ui/login",
                follow_redirects=False,
                data={"token": READ_TOKEN, "csrf": csrf_of(page.text), "next": "//evil.example/"},
            )
            assert r.headers["location"] == "/ui/"
    finally:
        close_context(ctx)


def test_silence_from_an_incident_then_expire_it(fresh: TestClient) -> None:
    login(fresh, WRITE_TOKEN)
    inc = critical(fresh)[0]
    token = csrf_of(fresh.get("/ui/silences", params={"incident": inc["id"]}).text)
    r = fresh.post(
        "/ui/silences",
        follow_redirects=False,
        data={
            "csrf": token,
            "incident": inc["id"],
            "use_category": "1",
            "value_category": inc["category"],
            "use_namespace": "1",
            "value_namespace": "llm-prod",
            "value_node": "gpu-node-1",
            "duration": "4h",
            "comment": "KV rollout",
        },
    )
    assert r.status_code == 303 and "done=silenced" in r.headers["location"]
    (s,) = fresh.get("/silences", params={"active": "true"}).json()
    assert s["matchers"] == {"category": [inc["category"]], "namespace": ["llm-prod"]}
    assert 3.9 * 3600 < s["ends_at"] - time.time() <= 4 * 3600
    assert "KV rollout" in fresh.get("/ui/silences").text
    # a silence without matchers is refused, with the reason shown
    r = fresh.post("/ui/silences", data={"csrf": token, "comment": "all", "duration": "8h"})
    assert r.status_code == 422 and "at least one matcher" in r.text
    assert 'value="all"' in r.text and '<option value="8h" selected>' in r.text  # kept
    r = fresh.post(f"/ui/silences/{s['id']}/expire", data={"csrf": token}, follow_redirects=False)
    assert r.status_code == 303
    assert fresh.get("/silences", params={"active": "true"}).json() == []
    (gone,) = fresh.get("/silences").json()
    assert gone["ends_at"] <= time.time()


def test_paste_form_classifies_like_the_api(client: TestClient) -> None:
    text = (REAL / "port-in-use.log").read_text()
    api = client.post(
        "/classify", content=text.encode(), headers={"Content-Type": "text/plain"}
    ).json()["primary"]
    token = csrf_of(client.get("/ui/classify").text)
    html = client.post("/ui/classify", data={"log": text, "format": "auto", "csrf": token}).text
    verdict = re.search(r'id="verdict"><strong>([^<]+)</strong> at <strong>([^<]+)<', html)
    assert verdict and verdict.groups() == (f"{api['tier']} / {api['category']}", api["stage"])
    up = client.post(
        "/ui/classify",
        data={"csrf": token, "format": "auto"},
        files={"file": ("pod.log", text.encode(), "text/plain")},
    ).text
    assert f"{api['tier']} / {api['category']}" in up and "pod.log" in up
    empty = client.post("/ui/classify", data={"log": "  ", "csrf": token})
    assert empty.status_code == 400
    # whatever a log says is shown as text, never as markup
    hostile = (
        "ERROR 12-02 14:39:21 [core.py:1] RuntimeError: CUDA error: out of memory "
        "<script>alert(1)</script><img src=x onerror=alert(2)>"
    )
    html = client.post("/ui/classify", data={"log": hostile, "csrf": token}).text
    assert "<script>alert(1)" not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_alert_links_open_the_incident_page() -> None:
    alert = Alert("opened", {"id": "abc", "primary": {}}, 1, "https://sentinel.example/")
    assert alert.url == "https://sentinel.example/ui/incidents/abc"
    assert alert.api_url == "https://sentinel.example/incidents/abc"


def test_a_pasted_log_is_classified_and_shown_back_without_its_secrets(
    client: TestClient,
) -> None:
    text = "\n".join(secret_lines())
    token = csrf_of(client.get("/ui/classify").text)
    html = client.post("/ui/classify", data={"log": text, "format": "auto", "csrf": token}).text
    assert "model_unavailable" in html
    assert leaked(html) == [] and "REDACTED" in html
    api = client.post("/classify", content=text.encode(), headers={"Content-Type": "text/plain"})
    assert api.status_code == 200 and leaked(api.text) == []


def test_the_silence_form_keeps_what_was_typed(fresh: TestClient) -> None:
    """A preview, and a trip through the sign-in page, give the form back as it was filled
    in: matchers, duration, reason, the incident it came from (issue #28)."""
    inc = critical(fresh)[0]
    token = csrf_of(fresh.get("/ui/silences", params={"incident": inc["id"]}).text)
    typed = {
        "csrf": token,
        "incident": inc["id"],
        "use_namespace": "1",
        "value_namespace": "llm-prod",
        "use_pod": "1",
        "value_pod": "llama-*",
        "duration": "4h",
        "comment": "rolling the driver, OPS-42",
    }
    seen = fresh.post("/ui/silences/preview", data=typed).text
    assert 'value="rolling the driver, OPS-42"' in seen
    assert '<option value="4h" selected>' in seen
    assert f'name="incident" value="{inc["id"]}"' in seen
    assert 'value="llama-*"' in seen
    # not signed in: to the sign-in page, and back to the same form
    r = fresh.post("/ui/silences", data=typed, follow_redirects=False)
    assert r.status_code == 303 and "/ui/login" in r.headers["location"]
    back = parse_qs(urlsplit(r.headers["location"]).query)["next"][0]
    assert back.startswith("/ui/silences?")
    login(fresh, WRITE_TOKEN)
    page = fresh.get(back.split("#")[0]).text
    assert 'value="rolling the driver, OPS-42"' in page
    assert '<option value="4h" selected>' in page and 'value="llama-*"' in page
    assert fresh.get("/silences", params={"active": "true"}).json() == []  # nothing made yet
    r = fresh.post("/ui/silences", data={**typed, "csrf": csrf_of(page)}, follow_redirects=False)
    assert r.status_code == 303 and "done=silenced" in r.headers["location"]
    (s,) = fresh.get("/silences", params={"active": "true"}).json()
    assert s["comment"] == "rolling the driver, OPS-42" and s["created_by"] == "token"
    assert 3.9 * 3600 < s["ends_at"] - time.time() <= 4 * 3600
    # extend and edit from the page, as the signed-in user
    r = fresh.post(f"/ui/silences/{s['id']}/extend", data={"csrf": csrf_of(page), "duration": "2h"})
    assert r.status_code == 200
    r = fresh.post(
        f"/ui/silences/{s['id']}/edit", data={"csrf": csrf_of(page), "comment": "OPS-43"}
    )
    got = fresh.get(f"/silences/{s['id']}").json()
    assert got["comment"] == "OPS-43" and got["ends_at"] == pytest.approx(s["ends_at"] + 7200)


def test_cascades_are_shown_as_cascades_of_the_root_cause(client: TestClient) -> None:
    """A related line the root cause brought about reads as its cascade, not as a second
    failure of the category its own rule names (issue #28)."""
    inc = next(i for i in critical(client) if i["category"] == "oom_kv_cache")
    cascades = [r for r in inc["related"] if r["role"] in ("cascade", "symptom")]
    assert cascades, inc["related"]
    html = client.get(f"/ui/incidents/{inc['id']}").text
    rows = re.findall(r'<tr class="role-(?:cascade|symptom)"><td>(.*?)</td>', html)
    assert rows and all(
        re.sub(r"<[^>]+>", "", r) in ("cascade of oom_kv_cache", "symptom of oom_kv_cache")
        for r in rows
    ), rows
