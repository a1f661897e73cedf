"""The dashboard in a real browser: Debian's headless Chromium driven by Playwright against a
running ``vllm-sentinel serve`` (a subprocess on SQLite) that ingested real vLLM logs through
``POST /ingest`` and pages a real webhook receiver.

What on-call does at 3 a.m.: filter the list (and watch it refresh by itself), open an
incident and read the failed rung of the startup ladder, sign in, silence similar incidents
and see the next matching alert not page, expire the silence, paste a log and read the
verdict; every page is also read with JavaScript off, and checked with axe-core (no serious
or critical violation, its colour-contrast rule in dark and light mode alike), and at 390 px
nothing scrolls sideways. Screenshots of each page at 1280x800 go to a temporary folder (its
path is printed), or to ``$SENTINEL_SCREENSHOTS`` when set (``docs/screenshots`` to refresh
the README's pictures): a test run never changes a tracked file.

Playwright never downloads a browser here: it launches ``/usr/bin/chromium`` (Debian's
``chromium`` package, which .ci/run installs). Without that binary the module is skipped.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.ui.present import bare
from tests.e2e_support import (
    CORPUS,
    REAL,
    ROOT,
    Db,
    Sentinel,
    fluent_bit_records,
    free_port,
    service_config,
    serving_records,
    wait_until,
    webhook,
)
from tests.receiver import Receiver

CHROMIUM = Path("/usr/bin/chromium")
if not CHROMIUM.exists():
    pytest.skip(
        f"{CHROMIUM} is missing (Debian package 'chromium'; .ci/run installs it)",
        allow_module_level=True,
    )

from playwright.sync_api import Browser, Page, expect, sync_playwright  # noqa: E402

TOKEN = "ui-write-token-0123456789abcdef"
AXE = ROOT / "tests" / "assets" / "axe.min.js"
SHOTS = Path(os.environ.get("SENTINEL_SCREENSHOTS") or tempfile.mkdtemp(prefix="sentinel-shots-"))
VIEWPORT = {"width": 1280, "height": 800}
KV = REAL / "kv-cache-too-small.cri.log"
PORT_IN_USE = REAL / "port-in-use.cri.log"
MODEL_OFFLINE = REAL / "model-unavailable-offline.cri.log"
WEIGHTS_MISSING = REAL / "weights-missing.cri.log"
WEIGHTS_CORRUPT = REAL / "weights-corrupt.cri.log"
TP2_SHM = REAL / "dev-shm-too-small.cri.log"
HEALTHY = REAL / "healthy-serving-prefix-caching-sigterm.cri.log"
DRIVER_TOO_OLD = CORPUS / "gh-verl-omni-133-v0202-driver-too-old-userwarning.log"
UNSUPPORTED_ARCH = REAL / "unsupported-architecture.log"


# ---- the service and its data ---------------------------------------------------------------
class Env:
    def __init__(self, svc: Sentinel, rx: Receiver, db: Db) -> None:
        self.svc, self.rx, self.db = svc, rx, db
        self.base = f"http://127.0.0.1:{svc.api_port}"

    def post(self, records: list[dict[str, Any]]) -> None:
        r = self.svc.http.post(
            "/ingest",
            content=json.dumps(records).encode(),
            headers={"Content-Type": "application/json", **self.svc.headers()},
        )
        assert r.status_code == 200, r.text

    def ingest(self, log: Path, ns: str, pod: str, node: str, *, end: float | None = None) -> None:
        self.post(fluent_bit_records(log, ns, pod, node=node, end=end))

    def incident(self, **params: str) -> dict[str, Any]:
        items = self.svc.incidents(severity="critical", **params)
        assert items, params
        return items[0]

    def settled(self) -> None:
        wait_until(self.db.settled, 30, "every notification settled")

    def paged(self, incident_id: str) -> list[dict[str, Any]]:
        return [r.json() for r in self.rx.accepted() if r.json()["incident"]["id"] == incident_id]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    work = tmp_path_factory.mktemp("ui-e2e")
    url = f"sqlite:///{work / 'sentinel.db'}"
    with Receiver() as rx:
        svc = Sentinel(
            work,
            "ui",
            service_config(
                store_url=url,
                api_port=free_port(),
                token=TOKEN,
                receivers=[webhook(rx.url)],
                notify={"group_wait_s": 0.2},
                fleet={"hold_s": 1.0, "threshold": 3, "window_s": 900},
            ),
        )
        db = Db(url)
        try:
            svc.start().wait_ready(60)
            e = Env(svc, rx, db)
            now = time.time()
            e.ingest(KV, "llm-prod", "llama-70b-0", "gpu-a100-7", end=now - 5400)
            e.ingest(PORT_IN_USE, "llm-prod", "qwen-7b-0", "gpu-a100-3", end=now - 3000)
            e.ingest(MODEL_OFFLINE, "llm-dev", "mistral-7b-0", "gpu-l4-2", end=now - 900)
            e.ingest(WEIGHTS_MISSING, "llm-dev", "phi-3-0", "gpu-l4-2", end=now - 600)
            e.ingest(TP2_SHM, "llm-batch", "granite-tp2-0", "gpu-a100-5", end=now - 200)
            for i in range(3):  # one Deployment on three nodes with a too-old driver: a fleet
                e.ingest(
                    DRIVER_TOO_OLD,
                    "llm-prod",
                    f"kimi-k3-6f7c9d8b4-{'abc'[i]}x7n",
                    f"gpu-b300-{17 + i}",
                    end=now - 60 + i,
                )
            e.post(serving_records("llm-prod", "llama-8b-serving-0", 400))
            recs = fluent_bit_records(HEALTHY, "llm-dev", "gemma-2b-0", node="gpu-l4-3")
            e.post(
                recs[
                    : next(
                        i
                        for i, r in enumerate(recs)
                        if "Loading weights" in r["log"] or "load_model" in r["log"]
                    )
                    + 1
                ]
            )  # still starting
            wait_until(
                lambda: any(i["id"].startswith("fleet-") for i in svc.incidents()),
                30,
                "the fleet incident",
            )
            e.settled()
            yield e
        finally:
            db.close()
            svc.close()
            print(f"----- service log -----\n{svc.log_tail(4000)}")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture()
def page(browser: Browser) -> Iterator[Page]:
    ctx = browser.new_context(viewport=VIEWPORT)
    pg = ctx.new_page()
    yield pg
    ctx.close()


def shot(page: Page, name: str, full_page: bool = False) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=full_page)
    print(f"screenshot: {SHOTS / name}.png")


def sign_in(page: Page) -> None:
    """Fill the login form the page is on (it returns to the page that asked)."""
    page.fill("#token", TOKEN)
    page.click("form.login button[type=submit]")


# ---- the list -------------------------------------------------------------------------------
def test_list_filters_counts_and_refreshes_itself(env: Env, page: Page) -> None:
    page.goto(env.base + "/")
    assert page.url == env.base + "/ui/"
    rows = page.locator("tr.inc")
    total = len(env.svc.incidents())
    expect(page.locator(".counts h3").first).to_have_text(f"{total} incidents")
    assert rows.count() == total
    shot(page, "incidents")

    page.select_option("#f-tier", "capacity")
    page.click("form.filters button[type=submit]")
    assert "tier=capacity" in page.url
    capacity = env.svc.incidents(tier="capacity")
    assert rows.count() == len(capacity) >= 2
    for i in range(rows.count()):
        assert "tier-row-capacity" in (rows.nth(i).get_attribute("class") or "")
    page.fill("#f-namespace", "llm-prod")
    page.click("form.filters button[type=submit]")
    assert sorted(rows.evaluate_all("rs => rs.map(r => r.dataset.id)")) == sorted(
        i["id"] for i in env.svc.incidents(tier="capacity", namespace="llm-prod")
    )
    # a count chip is a filter too
    page.goto(env.base + "/ui/incidents")
    page.click(".counts a.chip.tier-compatibility")
    assert "tier=compatibility" in page.url
    assert rows.count() == len(env.svc.incidents(tier="compatibility")) >= 4

    # live: a new incident appears without a reload
    page.goto(env.base + "/ui/incidents?poll=2&namespace=llm-live")
    expect(page.locator("p.empty")).to_be_visible()
    page.evaluate("window.__sameDocument = true")
    env.ingest(WEIGHTS_CORRUPT, "llm-live", "llama-3-0", "gpu-h100-1")
    new = env.incident(namespace="llm-live")
    expect(page.locator(f'tr[data-id="{new["id"]}"]')).to_be_visible(timeout=15_000)
    assert page.evaluate("window.__sameDocument") is True
    expect(page.locator("#live")).to_contain_text("updated")


def _badge_contrast(badge: Any) -> float:
    fg, bg = badge.evaluate("e => [getComputedStyle(e).color, getComputedStyle(e).backgroundColor]")
    return _contrast(fg, bg)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_a_crash_loop_has_its_badge_in_the_list_on_a_laptop_and_a_phone(
    env: Env, browser: Browser, scheme: str
) -> None:
    """One pod failing the same way three times, two minutes apart: its row in the list says
    "crash loop" (readable in either scheme, on the card at 390 px too) and how many
    restarts; a pod that failed once has no badge."""
    ns = "llm-loop"
    if not env.svc.incidents(namespace=ns):
        now = time.time()
        for k in range(3):
            env.ingest(KV, ns, "llama-loop-0", "gpu-a100-9", end=now - 600 + 120 * k)
    loop = wait_until(
        lambda: next(
            (
                i
                for i in env.svc.incidents(namespace=ns)
                if (i.get("extra") or {}).get("crash_loop")
            ),
            None,
        ),
        30,
        "the crash loop",
    )
    once = env.incident(namespace="llm-prod", category="oom_kv_cache")  # failed once
    for viewport in (VIEWPORT, {"width": 390, "height": 844}):
        ctx = browser.new_context(
            viewport=viewport,  # type: ignore[arg-type]
            is_mobile=viewport["width"] < 640,
            color_scheme=scheme,  # type: ignore[arg-type]
        )
        page = ctx.new_page()
        try:
            page.goto(env.base + "/ui/incidents")
            row = page.locator(f'tr.inc[data-id="{loop["id"]}"]')
            badge = row.locator("td.fail-cell .badge.crash")
            expect(badge).to_be_visible()
            expect(badge).to_have_text("crash loop")
            expect(row.locator(".restarts")).to_have_text(f"{loop['restarts']} restarts")
            box, card = badge.bounding_box(), row.bounding_box()
            assert box is not None and card is not None
            assert box["x"] >= card["x"] and box["x"] + box["width"] <= card["x"] + card["width"]
            assert box["x"] + box["width"] <= viewport["width"]
            assert _badge_contrast(badge) >= 4.5
            expect(page.locator(f'tr.inc[data-id="{once["id"]}"] .badge.crash')).to_have_count(0)
            if viewport is VIEWPORT:
                shot(page, f"crash-loop-list-{scheme}")
            row.locator("a.inc-link").click()
            expect(page.locator(".badge.crash").first).to_have_text("crash loop")
        finally:
            ctx.close()


# ---- one incident ---------------------------------------------------------------------------
def test_detail_shows_the_failed_rung_and_the_whole_root_cause(env: Env, page: Page) -> None:
    inc = env.incident(namespace="llm-prod", category="oom_kv_cache")
    full = env.svc.http.get(f"/incidents/{inc['id']}").json()
    page.goto(env.base + "/ui/incidents?namespace=llm-prod")
    page.click(f'a.inc-link[href$="/ui/incidents/{inc["id"]}"]')
    assert page.url.endswith(f"/ui/incidents/{inc['id']}")
    failed = page.locator(".ladder .rung-failed")
    expect(failed).to_have_count(1)
    assert failed.get_attribute("data-stage") == "kv_cache_init"
    assert failed.get_attribute("aria-current") == "step"
    expect(failed).to_contain_text("failed here")
    passed = page.locator(".ladder .rung-passed")
    assert passed.evaluate_all("rs => rs.map(r => r.dataset.stage)") == [
        "cuda_init",
        "distributed_init",
        "model_load",
    ]
    for i in range(passed.count()):
        expect(passed.nth(i).locator(".rung-time")).to_contain_text("UTC")
    expect(page.locator(".ladder .rung-not-reached")).to_have_count(2)  # api_server, serving
    # the message without its "(EngineCore pid=...) ERROR ... [core.py:1510]" prefix (#22);
    # the whole line is the element's title
    assert page.inner_text("pre.rootcause") == bare(full["line"]) != full["line"]
    assert page.get_attribute("pre.rootcause", "title") == full["line"]
    expect(page.locator("pre.evidence mark")).to_contain_text("KV cache")
    expect(page.locator("#deliveries-h + h3")).to_contain_text("oncall")
    expect(page.locator("table.deliveries")).to_contain_text("sent")
    expect(page.locator("section[aria-labelledby=playbook-h]")).to_contain_text(
        "model-serving team"
    )
    shot(page, "incident")

    fleet = next(i for i in env.svc.incidents() if i["id"].startswith("fleet-"))
    page.goto(env.base + f"/ui/incidents/{fleet['id']}")
    expect(page.locator(".ladder .rung-failed")).to_have_attribute("data-stage", fleet["stage"])
    expect(page.locator("section[aria-labelledby=fleet-h] tbody tr")).to_have_count(3)
    expect(page.locator(".explain")).to_be_visible()  # the compatibility explanation


# ---- silences -------------------------------------------------------------------------------
def test_a_silence_made_from_an_incident_mutes_the_next_matching_alert(
    env: Env, page: Page
) -> None:
    env.ingest(KV, "llm-silence", "llama-0", "gpu-a100-9")
    first = env.incident(namespace="llm-silence")
    wait_until(lambda: env.paged(first["id"]), 20, "the first page")

    page.goto(env.base + f"/ui/incidents/{first['id']}")
    page.click(".actions-bar >> text=Silence similar…")
    expect(page.locator("#use-category")).to_be_checked()
    expect(page.locator("#value-category")).to_have_value("oom_kv_cache")
    expect(page.locator("#use-namespace")).to_be_checked()
    expect(page.locator("#value-namespace")).to_have_value("llm-silence")
    expect(page.locator("#use-node")).not_to_be_checked()
    page.fill("#comment", "KV cache sizing change rolling out")
    page.click("#create-silence")
    # writing needs the token: the login form, then back to the silence form
    assert "/ui/login" in page.url and "why=write" in page.url
    sign_in(page)
    assert "/ui/silences?" in page.url and "incident=" in page.url
    # back on the form as it was filled in (the reason was emptied before, issue #28)
    expect(page.locator("#comment")).to_have_value("KV cache sizing change rolling out")
    expect(page.locator("#value-namespace")).to_have_value("llm-silence")
    cookie = next(c for c in page.context.cookies() if c["name"] == "sentinel_token")
    assert cookie["httpOnly"] and cookie["secure"] and cookie["sameSite"] == "Lax"
    # preview first: what it hides, in this namespace only
    page.click("#preview-silence")
    expect(page.locator("#silence-preview")).to_contain_text("oom_kv_cache")
    expect(page.locator(f"#silence-preview a[href$='{first['id']}']")).to_have_count(1)
    expect(page.locator("#silence-preview")).not_to_contain_text("every namespace")
    expect(page.locator("#value-namespace")).to_have_value("llm-silence")
    expect(page.locator("#comment")).to_have_value("KV cache sizing change rolling out")
    page.select_option("#duration", "4h")
    page.click("#preview-silence")  # a second preview keeps the duration too
    expect(page.locator("#duration")).to_have_value("4h")
    page.click("#create-silence")
    expect(page.locator("p.notice")).to_contain_text("Silence created")
    row = page.locator("#active-silences tbody tr")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("category=oom_kv_cache")
    expect(row).to_contain_text("namespace=llm-silence")
    expect(row).to_contain_text("token")  # who made it: the signed-in actor, never a typed name
    silence = env.svc.http.get("/silences", params={"active": "true"}).json()[0]
    assert 3.9 * 3600 < silence["ends_at"] - silence["starts_at"] <= 4 * 3600 + 5

    # the next matching failure is recorded but does not page
    env.ingest(KV, "llm-silence", "mistral-0", "gpu-a100-8")  # another workload, same failure
    second = next(i for i in env.svc.incidents(namespace="llm-silence") if i["id"] != first["id"])
    env.settled()
    assert env.paged(second["id"]) == []
    assert env.db.rows("SELECT status FROM deliveries WHERE incident_id = :i", i=second["id"]) == [
        {"status": "silenced"}
    ]
    page.goto(env.base + f"/ui/incidents/{second['id']}")
    expect(page.locator("table.deliveries")).to_contain_text("silenced")
    page.goto(env.base + "/ui/silences")
    shot(page, "silences")

    page.click("#active-silences button:has-text('Expire')")
    expect(page.locator("p.notice")).to_contain_text("Silence expired")
    expect(page.locator("#active-silences")).to_have_count(0)
    expect(page.locator("#expired-silences tbody tr")).to_contain_text("llm-silence")

    # signed in: resolve and feedback from the page
    page.goto(env.base + f"/ui/incidents/{second['id']}")
    page.check("input[name=verdict][value=wrong]")
    page.select_option("#fb-category", "oom_runtime")
    page.click("#feedback button[type=submit]")
    expect(page.locator("p.notice")).to_contain_text("feedback was recorded")
    page.fill("#reason", "max-model-len lowered")
    page.click("#resolve button[type=submit]")
    expect(page.locator("p.notice")).to_contain_text("Incident resolved")
    after = env.svc.http.get(f"/incidents/{second['id']}").json()
    assert after["status"] == "resolved" and after["resolution"] == "max-model-len lowered"
    assert [(f["correct"], f["category"]) for f in after["feedback"]] == [(False, "oom_runtime")]


# ---- paste a log ----------------------------------------------------------------------------
def test_paste_a_log_gives_the_same_verdict_as_the_api(env: Env, page: Page) -> None:
    text = UNSUPPORTED_ARCH.read_text()
    api = env.svc.http.post(
        "/classify", content=text.encode(), headers={"Content-Type": "text/plain"}
    ).json()["primary"]
    page.goto(env.base + "/ui/classify")
    page.fill("#log", text)
    page.click("form.paste button[type=submit]")
    expect(page.locator("#verdict")).to_have_text(
        f"{api['tier']} / {api['category']} at {api['stage']}"
    )
    expect(page.locator("#result pre.rootcause").first).to_have_text(bare(api["line"]))
    expect(page.locator("#result .rung-failed").first).to_have_attribute("data-stage", api["stage"])
    page.locator("#result").scroll_into_view_if_needed()
    shot(page, "classify")
    # the same log as a file (CRI envelope)
    cri = env.svc.http.post(
        "/classify", content=KV.read_bytes(), headers={"Content-Type": "text/plain"}
    ).json()["primary"]
    page.goto(env.base + "/ui/classify")
    page.set_input_files("#file", str(KV))
    page.click("form.paste button[type=submit]")
    expect(page.locator("#verdict")).to_have_text(
        f"{cri['tier']} / {cri['category']} at {cri['stage']}"
    )


# ---- fleets, streams, API docs --------------------------------------------------------------
def test_fleets_and_streams(env: Env, page: Page) -> None:
    page.goto(env.base + "/ui/fleets")
    fleet = page.locator("article.fleet").first
    expect(fleet).to_contain_text("on 3 workloads")
    expect(fleet.locator("code.shared-key")).to_contain_text("driver_branch=")
    expect(fleet.locator("table.members tbody tr")).to_have_count(3)
    expect(fleet.locator("table.members")).to_contain_text("gpu-b300-18")
    shot(page, "fleets")
    page.goto(env.base + "/ui/streams")
    states = page.locator("table.streams tbody .badge").all_inner_texts()
    assert {"serving", "failed", "starting"} <= set(states), states
    shot(page, "streams")
    page.click("nav.tabs >> text=serving")
    expect(page.locator("table.streams tbody tr")).to_have_count(1)
    expect(page.locator("table.streams")).to_contain_text("llama-8b-serving-0")


def test_api_docs_load_without_leaving_the_service(env: Env, page: Page) -> None:
    foreign: list[str] = []
    page.on(
        "request",
        lambda r: (
            None
            if r.url.startswith(env.base) or r.url.startswith("data:")
            else foreign.append(r.url)
        ),
    )
    page.goto(env.base + "/docs")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text(
        "vllm-sentinel", timeout=15_000
    )
    expect(page.locator(".opblock-summary-path").first).to_be_visible()
    assert foreign == []


# ---- without JavaScript ---------------------------------------------------------------------
def test_every_page_reads_without_javascript(env: Env, browser: Browser) -> None:
    ctx = browser.new_context(viewport=VIEWPORT, java_script_enabled=False)
    page = ctx.new_page()
    try:
        page.goto(env.base + "/ui/")
        expect(page.locator("tr.inc").first).to_be_visible()
        page.select_option("#f-stage", "kv_cache_init")
        page.click("form.filters button[type=submit]")
        stages = page.locator("tr.inc td:nth-child(3)").all_inner_texts()
        assert stages and set(stages) == {"kv_cache_init"}
        page.locator("a.inc-link").first.click()
        expect(page.locator(".ladder .rung-failed")).to_have_attribute(
            "data-stage", "kv_cache_init"
        )
        for path, what in (
            ("/ui/fleets", "article.fleet"),
            ("/ui/streams", "table.streams"),
            ("/ui/silences", "#new-silence"),
            ("/ui/classify", "#log"),
        ):
            page.goto(env.base + path)
            expect(page.locator(what).first).to_be_visible()
        page.goto(env.base + "/ui/classify")
        page.fill("#log", UNSUPPORTED_ARCH.read_text())
        page.click("form.paste button[type=submit]")
        expect(page.locator("#verdict")).to_contain_text(" at ")
    finally:
        ctx.close()


# ---- accessibility --------------------------------------------------------------------------
def axe_violations(page: Page) -> list[dict[str, Any]]:
    page.add_script_tag(path=str(AXE))
    result = page.evaluate("""async () => {
        const r = await axe.run(document, {resultTypes: ['violations']});
        return r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
            nodes: v.nodes.slice(0, 3).map(n => n.target.join(' '))}));
    }""")
    return list(result)


def every_page(env: Env) -> list[str]:
    kv = env.incident(namespace="llm-prod", category="oom_kv_cache")
    fleet = next(i for i in env.svc.incidents() if i["id"].startswith("fleet-"))
    return [
        "/ui/",
        "/ui/incidents?tier=capacity&range=24h",
        "/ui/incidents?q=llama",
        f"/ui/incidents/{kv['id']}",
        f"/ui/incidents/{fleet['id']}",
        "/ui/fleets",
        "/ui/streams",
        "/ui/silences",
        f"/ui/silences?incident={kv['id']}",
        "/ui/receivers",
        "/ui/classify",
        "/ui/login",
    ]


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_no_serious_accessibility_violation_on_any_page(
    env: Env, browser: Browser, scheme: str
) -> None:
    """axe-core on every page in both colour schemes: its colour-contrast rule (serious)
    holds every text to 4.5:1 (3:1 when large) on what is really behind it."""
    # the pages forbid inline scripts (CSP); the test's own axe-core is let in
    ctx = browser.new_context(viewport=VIEWPORT, bypass_csp=True, color_scheme=scheme)  # type: ignore[arg-type]
    page = ctx.new_page()
    found: dict[str, list[dict[str, Any]]] = {}
    for path in every_page(env):
        page.goto(env.base + path)
        found[path] = axe_violations(page)
    page.goto(env.base + "/ui/classify")
    page.fill("#log", UNSUPPORTED_ARCH.read_text())
    page.click("form.paste button[type=submit]")
    expect(page.locator("#verdict")).to_be_visible()
    found["/ui/classify (result)"] = axe_violations(page)
    ctx.close()
    serious = {
        p: [v for v in vs if v["impact"] in ("serious", "critical")] for p, vs in found.items()
    }
    serious = {p: vs for p, vs in serious.items() if vs}
    assert not serious, json.dumps(serious, indent=1)
    print("axe:", {p: [v["id"] for v in vs] for p, vs in found.items()})


# ---- phone and dark mode --------------------------------------------------------------------
def _luminance(css: str) -> float:
    """WCAG relative luminance of an ``rgb(r, g, b)`` / ``rgba(...)`` colour."""
    r, g, b = (int(float(v)) / 255 for v in css[css.index("(") + 1 : -1].split(",")[:3])

    def lin(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    return 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b)


def _contrast(a: str, b: str) -> float:
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


# what sticks out past the right edge (the innermost elements), to say why a page is too wide
WIDEST = """() => [...document.querySelectorAll('body *')]
    .filter(e => e.getBoundingClientRect().right > 391
        && ![...e.children].some(c => c.getBoundingClientRect().right > 391))
    .slice(0, 5).map(e => e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right))"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_at_390_px_the_list_is_cards_and_nothing_scrolls_sideways(
    env: Env, browser: Browser, scheme: str
) -> None:
    ctx = browser.new_context(
        viewport={"width": 390, "height": 844},
        is_mobile=True,
        color_scheme=scheme,  # type: ignore[arg-type]
    )
    page = ctx.new_page()
    wide: dict[str, Any] = {}
    try:
        for path in every_page(env):
            page.goto(env.base + path)
            width = int(page.evaluate("document.documentElement.scrollWidth"))
            if width > 390:
                wide[path] = page.evaluate(WIDEST)
        page.goto(env.base + "/ui/incidents")
        card = page.locator("tr.inc").first
        box = card.bounding_box()
        assert box is not None and box["width"] <= 390
        # a card: category, where (pod), age, the root cause's first line, all on the screen
        for cell in ("td.fail-cell a.inc-link", "td.where", "td.nowrap", "td.line-cell code"):
            b = card.locator(cell).bounding_box()
            assert b is not None and b["x"] >= 0 and b["x"] + b["width"] <= 390, (cell, b)
        expect(card.locator("td.stage-cell")).to_be_hidden()
        shot(page, f"phone-list-{scheme}", full_page=True)
    finally:
        ctx.close()
    assert not wide, f"wider than 390 px: {wide}"


def test_on_a_phone_the_first_incident_is_on_the_first_screen(env: Env, browser: Browser) -> None:
    ctx = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    page = ctx.new_page()
    try:
        page.goto(env.base + "/ui/incidents")
        first = page.locator("tr.inc").first
        box = first.bounding_box()
        assert box is not None and box["y"] + min(box["height"], 40) <= 844, box
        # the filters are still there, below, and the heading's link jumps to them
        expect(page.locator("a.jump-filters")).to_be_visible()
        filters = page.locator("#filters").bounding_box()
        assert filters is not None and filters["y"] > box["y"]
        page.click("a.jump-filters")
        expect(page.locator("#f-tier")).to_be_in_viewport()
    finally:
        ctx.close()
    # a laptop keeps the filters above the list, and no jump link
    ctx = browser.new_context(viewport=VIEWPORT)
    page = ctx.new_page()
    try:
        page.goto(env.base + "/ui/incidents")
        expect(page.locator("a.jump-filters")).to_be_hidden()
        filters = page.locator("#filters").bounding_box()
        row = page.locator("tr.inc").first.bounding_box()
        assert filters is not None and row is not None and filters["y"] < row["y"]
    finally:
        ctx.close()


@pytest.mark.parametrize("scheme", ["dark", "light"])
def test_dark_mode_follows_the_system_and_keeps_text_readable(
    env: Env, browser: Browser, scheme: str
) -> None:
    ctx = browser.new_context(viewport=VIEWPORT, color_scheme=scheme)  # type: ignore[arg-type]
    page = ctx.new_page()
    try:
        page.goto(env.base + "/ui/incidents")
        bg = page.evaluate("getComputedStyle(document.documentElement).backgroundColor")
        fg = page.evaluate("getComputedStyle(document.body).color")
        assert (_luminance(bg) < 0.05) is (scheme == "dark"), bg
        assert _contrast(fg, bg) >= 4.5
        link = page.locator("main a").first
        assert _contrast(link.evaluate("e => getComputedStyle(e).color"), bg) >= 4.5
        card_bg = page.evaluate(
            "getComputedStyle(document.querySelector('table.data') || document.body)"
            ".backgroundColor"
        )
        if card_bg not in ("rgba(0, 0, 0, 0)", "transparent"):
            assert (_luminance(card_bg) < 0.05) is (scheme == "dark"), card_bg
    finally:
        ctx.close()
