"""The dashboard's pages under ``/ui/`` (server-rendered; a little JavaScript only refreshes
the incident list).

Reads need what the API's reads need, writes what its writes need (see
:mod:`service.ui.auth`); every form posts back here and is answered with a redirect (303)
to the page that shows the result, so reload never re-submits.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

import anyio
from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from pydantic import ValidationError
from starlette.datastructures import UploadFile

from service.api.body import MiB, read_body
from service.api.routers import classify as classify_api
from service.api.schemas import FeedbackRequest, ResolveRequest, SilenceRequest
from service.api.timespec import parse_duration, parse_instant
from service.ingest.compression import gunzip
from service.taxonomy import CATEGORIES, CATEGORY_TIER, STAGES, TIERS
from service.ui import auth, data, present

HERE = Path(__file__).resolve().parent
templates = Jinja2Templates(directory=str(HERE / "templates"))
templates.env.filters.update(
    ts=present.fmt_time,
    iso=present.iso_time,
    dur=present.fmt_duration,
    rungtext=present.ladder_state_text,
)
router = APIRouter(prefix="/ui", include_in_schema=False)

PAGE_SIZE = 50
POLL_S = 10
MAX_FORM = 64 * 1024  # forms other than the paste
MAX_PASTE = classify_api.MAX_BODY
RANGES = (
    ("", "any time"),
    ("1h", "last hour"),
    ("6h", "last 6 hours"),
    ("24h", "last 24 hours"),
    ("7d", "last 7 days"),
    ("30d", "last 30 days"),
)
NOTICES = {
    "resolved": "Incident resolved.",
    "feedback": "Thank you: the feedback was recorded.",
    "silenced": "Silence created: matching incidents will not page until it ends.",
    "expired": "Silence expired.",
    "login": "Signed in.",
    "logout": "Signed out.",
}
CSP = (
    "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)


# ---- plumbing -------------------------------------------------------------------------------
def _ctx(request: Request) -> Any:
    return request.app.state.ctx


def _store(request: Request) -> Any:
    store = _ctx(request).store
    if store is None:
        raise HTTPException(status_code=503, detail="store not available")
    return store


def _base(request: Request) -> str:
    return str(request.scope.get("root_path") or "").rstrip("/")


def _headers(response: Response) -> Response:
    response.headers.setdefault("Content-Security-Policy", CSP)
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers["Cache-Control"] = "no-store"
    return response


def render(request: Request, name: str, status_code: int = 200, **context: Any) -> Response:
    now = time.time()
    notice = NOTICES.get(request.query_params.get("done") or "")
    base = _base(request)
    context.setdefault("error", None)
    response = templates.TemplateResponse(
        request,
        name,
        {
            "base": base,
            "now": now,
            "csrf": auth.csrf_token(request),
            "notice": notice,
            "can_write": auth.can_write(request),
            "signed_in": auth.given_token(request) is not None
            and auth.token_valid(request, auth.given_token(request) or ""),
            "tokens": auth.tokens_configured(request),
            "nav": context.pop("nav", ""),
            "ago": lambda t: present.fmt_ago(t, now),
            "age": lambda t: present.age_class(t, now),
            "poll_s": _poll_s(request),
            **context,
        },
        status_code=status_code,
    )
    auth.keep_csrf(response, request)
    return _headers(response)


def _poll_s(request: Request) -> int:
    """How often the list refreshes itself: ``?poll=`` seconds (2 to 300), else 10."""
    try:
        return min(300, max(2, int(request.query_params.get("poll") or POLL_S)))
    except ValueError:
        return POLL_S


def redirect(request: Request, path: str, **query: str) -> RedirectResponse:
    q = {k: v for k, v in query.items() if v}
    url = _base(request) + path + (("?" + urlencode(q)) if q else "")
    return RedirectResponse(url, status_code=303)


def _login_redirect(request: Request) -> RedirectResponse:
    target = request.url.path + (("?" + request.url.query) if request.url.query else "")
    return redirect(request, "/ui/login", next=target)


def _denied_read(request: Request) -> Response | None:
    """None when this request may read; else the way to the login form."""
    if auth.can_read(request):
        return None
    if request.query_params.get("fragment"):
        return _headers(Response("sign in again", status_code=401, media_type="text/plain"))
    return _login_redirect(request)


async def _form(request: Request, limit: int = MAX_FORM) -> dict[str, Any]:
    """A form body (urlencoded or multipart), bounded; values are strings or uploads."""
    body = await read_body(request, limit)
    media = (request.headers.get("content-type") or "").split(";", 1)[0].strip().lower()
    if media == "application/x-www-form-urlencoded":
        try:
            parsed = parse_qs(
                body.decode("utf-8", "replace"), keep_blank_values=True, max_num_fields=200
            )
        except ValueError:
            raise HTTPException(status_code=400, detail="too many form fields") from None
        return {k: v[-1] for k, v in parsed.items()}
    if media == "multipart/form-data":

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        fresh = Request(request.scope, receive)
        form = await fresh.form(max_files=1, max_fields=50, max_part_size=limit)
        return dict(form.items())
    raise HTTPException(status_code=415, detail="expected a form")


def _write_guard(request: Request, form: dict[str, Any]) -> Response | None:
    """None when this form may write; else the answer (403 for a forged form, the login
    form when the token is missing)."""
    if not auth.csrf_ok(request, str(form.get("csrf") or "")):
        return _headers(
            HTMLResponse(
                "<!doctype html><html lang=en><title>Refused</title><main><h1>Refused</h1>"
                "<p>This form is stale or came from another site. Go back, reload the page and "
                "submit it again.</p></main></html>",
                status_code=403,
            )
        )
    if not auth.can_write(request):
        return redirect(request, "/ui/login", next=str(form.get("back") or "/ui/"), why="write")
    return None


def _safe_next(target: str | None) -> str:
    """A local path to go back to after signing in (never another site)."""
    if not target or not target.startswith("/ui") or target.startswith("//") or "\\" in target:
        return "/ui/"
    return target


# ---- incidents ------------------------------------------------------------------------------
def _list_query(request: Request) -> tuple[dict[str, str | None], dict[str, Any], str | None]:
    q = request.query_params
    filters = {name: (q.get(name) or "").strip() or None for name in data.FILTERS}
    errors = []
    for name, allowed in (
        ("tier", TIERS),
        ("category", CATEGORIES),
        ("stage", STAGES),
        ("status", ("open", "resolved")),
        ("severity", ("critical", "warning")),
    ):
        if filters[name] and filters[name] not in allowed:
            errors.append(f"unknown {name} {filters[name]!r}")
            filters[name] = None
    now = time.time()
    rng = q.get("range") or ""
    since = until = None
    try:
        if rng:
            since = now - parse_duration(rng)
        if q.get("since"):
            since = parse_instant(q["since"])
        if q.get("until"):
            until = parse_instant(q["until"])
    except ValueError as exc:
        errors.append(str(exc))
    times = {
        "range": rng if rng in dict(RANGES) else "",
        "since": q.get("since") or "",
        "until": q.get("until") or "",
        "since_t": since,
        "until_t": until,
    }
    return filters, times, "; ".join(errors) or None


def _incident_page(request: Request) -> Response:
    denied = _denied_read(request)
    if denied:
        return denied
    store = _store(request)
    filters, times, error = _list_query(request)
    cursor = request.query_params.get("cursor") or None
    try:
        items, nxt = data.list_incidents(
            store,
            filters,
            since=times["since_t"],
            until=times["until_t"],
            limit=PAGE_SIZE,
            cursor=cursor,
        )
    except ValueError:
        items, nxt, error = [], None, "that page no longer exists; showing the newest"
        items, nxt = data.list_incidents(
            store,
            filters,
            since=times["since_t"],
            until=times["until_t"],
            limit=PAGE_SIZE,
            cursor=None,
        )
    counts = data.incident_counts(store, filters, since=times["since_t"], until=times["until_t"])
    active = {k: v for k, v in filters.items() if v}
    query = {**active, **{k: times[k] for k in ("range", "since", "until") if times[k]}}
    if request.query_params.get("poll"):
        query["poll"] = str(_poll_s(request))
    fragment = bool(request.query_params.get("fragment"))
    return render(
        request,
        "_results.html" if fragment else "incidents.html",
        nav="incidents",
        title="Incidents",
        items=items,
        next_cursor=nxt,
        counts=counts,
        filters=filters,
        active=active,
        times=times,
        error=error,
        ranges=RANGES,
        tiers=TIERS,
        categories=CATEGORIES,
        stages=STAGES,
        category_tier=CATEGORY_TIER,
        namespaces=data.namespaces(store),
        query=query,
        cursor=cursor,
        query_string=urlencode(query),
        with_filter=_with_filter(query),
    )


def _with_filter(query: dict[str, str]) -> Any:
    def link(**changes: str | None) -> str:
        q = dict(query)
        for k, v in changes.items():
            if v is None:
                q.pop(k, None)
            else:
                q[k] = v
        return "?" + urlencode(q) if q else "?"

    return link


@router.get("/", response_class=HTMLResponse)
def home(request: Request) -> Response:
    return _incident_page(request)


@router.get("/incidents", response_class=HTMLResponse)
def incidents_page(request: Request) -> Response:
    return _incident_page(request)


@router.get("/incidents/{incident_id}", response_class=HTMLResponse)
def incident_page(request: Request, incident_id: str) -> Response:
    denied = _denied_read(request)
    if denied:
        return denied
    store = _store(request)
    inc = store.get_incident(incident_id)
    if inc is None:
        return render(
            request,
            "missing.html",
            status_code=404,
            nav="incidents",
            title="Incident not found",
            what=f"incident {incident_id}",
        )
    extra = inc.get("extra") or {}
    deliveries: dict[str, list[dict[str, Any]]] = {}
    for d in inc.get("deliveries") or []:
        deliveries.setdefault(d["receiver"], []).append(d)
    fleet = None
    if inc.get("fleet_id"):
        fleet = store.get_incident(inc["fleet_id"])
    return render(
        request,
        "incident.html",
        nav="incidents",
        title=f"{inc['category']} at {inc.get('stage')}",
        inc=inc,
        extra=extra,
        playbook=extra.get("playbook") or {},
        ladder=present.ladder(inc),
        facts=present.facts_rows(inc.get("facts") or {}, inc.get("meta")),
        changed=extra.get("changed_since_last_good") or {},
        deliveries=deliveries,
        fleet=fleet,
        categories=CATEGORIES,
        silence=present.silence_candidates(inc),
        durations=present.DURATIONS,
        members=inc.get("members") or [],
    )


@router.post("/incidents/{incident_id}/resolve")
async def resolve(request: Request, incident_id: str) -> Response:
    form = await _form(request)
    refused = _write_guard(request, form)
    if refused:
        return refused
    try:
        body = ResolveRequest(reason=str(form.get("reason") or "").strip())
    except ValidationError:
        return redirect(request, f"/ui/incidents/{quote(incident_id)}", error="reason")
    store = _store(request)
    inc = await anyio.to_thread.run_sync(
        lambda: store.resolve_incident(incident_id, body.reason, at=time.time())
    )
    if inc is None:
        raise HTTPException(status_code=404, detail="unknown incident")
    return redirect(request, f"/ui/incidents/{quote(incident_id)}", done="resolved")


@router.post("/incidents/{incident_id}/feedback")
async def feedback(request: Request, incident_id: str) -> Response:
    form = await _form(request)
    refused = _write_guard(request, form)
    if refused:
        return refused
    verdict = str(form.get("verdict") or "")
    try:
        body = FeedbackRequest(
            correct=verdict == "right",
            category=(str(form.get("category") or "") or None) if verdict == "wrong" else None,
            comment=str(form.get("comment") or "").strip() or None,
        )
        if verdict not in ("right", "wrong"):
            raise ValueError("verdict")
    except (ValidationError, ValueError):
        return redirect(request, f"/ui/incidents/{quote(incident_id)}", error="feedback")
    store = _store(request)
    fb = await anyio.to_thread.run_sync(
        lambda: store.add_feedback(incident_id, body.correct, body.category, body.comment)
    )
    if fb is None:
        raise HTTPException(status_code=404, detail="unknown incident")
    return redirect(request, f"/ui/incidents/{quote(incident_id)}", done="feedback")


# ---- fleets and streams ---------------------------------------------------------------------
@router.get("/fleets", response_class=HTMLResponse)
def fleets_page(request: Request) -> Response:
    denied = _denied_read(request)
    if denied:
        return denied
    status = request.query_params.get("status") or None
    if status not in (None, "open", "resolved"):
        status = None
    fleets = data.list_fleets(_store(request), status)
    return render(
        request, "fleets.html", nav="fleets", title="Fleets", fleets=fleets, status=status
    )


STREAM_STATES = ("starting", "stalled", "ready", "serving", "failed", "stopped")


@router.get("/streams", response_class=HTMLResponse)
def streams_page(request: Request) -> Response:
    denied = _denied_read(request)
    if denied:
        return denied
    now = time.time()
    deadlines = _ctx(request).settings.stall.deadlines_s
    rows = []
    listed = data.list_streams(_store(request))
    for st in listed:
        st["view"] = present.stream_state(st, now, deadlines)
        rows.append(st)
    wanted = request.query_params.get("state") or ""
    counts = {s: sum(1 for r in rows if r["view"]["state"] == s) for s in STREAM_STATES}
    if wanted in STREAM_STATES:
        rows = [r for r in rows if r["view"]["state"] == wanted]
    return render(
        request,
        "streams.html",
        nav="streams",
        title="Streams",
        streams=rows,
        state=wanted,
        states=STREAM_STATES,
        counts=counts,
        truncated=data.MAX_STREAMS if len(listed) >= data.MAX_STREAMS else 0,
        stage_index={s: i for i, s in enumerate(STAGES)},
        stages=STAGES,
        labels=present.LADDER_LABEL,
    )


# ---- silences -------------------------------------------------------------------------------
@router.get("/silences", response_class=HTMLResponse)
def silences_page(request: Request) -> Response:
    denied = _denied_read(request)
    if denied:
        return denied
    store = _store(request)
    all_ = store.list_silences()
    now = time.time()
    active = [s for s in all_ if s["active"]]
    pending = [s for s in all_ if not s["active"] and s["starts_at"] > now]
    expired = [s for s in all_ if not s["active"] and s["ends_at"] <= now][:100]
    inc = None
    incident_id = request.query_params.get("incident")
    if incident_id:
        inc = store.get_incident(incident_id)
    return render(
        request,
        "silences.html",
        nav="silences",
        title="Silences",
        active=active,
        pending=pending,
        expired=expired,
        inc=inc,
        candidates=present.silence_candidates(inc) if inc else [],
        durations=present.DURATIONS,
        form_error=request.query_params.get("error"),
    )


@router.post("/silences")
async def create_silence(request: Request) -> Response:
    form = await _form(request)
    refused = _write_guard(request, form)
    if refused:
        return refused
    matchers: dict[str, list[str]] = {}
    for key in present.SILENCE_KEYS:
        if form.get(f"use_{key}") and str(form.get(f"value_{key}") or "").strip():
            matchers[key] = [str(form[f"value_{key}"]).strip()]
    extra_key = str(form.get("extra_key") or "").strip()
    extra_value = str(form.get("extra_value") or "").strip()
    if extra_key and extra_value:
        matchers.setdefault(extra_key, []).append(extra_value)
    incident = str(form.get("incident") or "")
    back = {"incident": incident} if incident else {}
    try:
        body = SilenceRequest(
            matchers=matchers,
            duration=str(form.get("duration") or "2h"),
            comment=str(form.get("comment") or "").strip() or "silenced from the dashboard",
            created_by=str(form.get("created_by") or "").strip()[:200] or "dashboard",
        )
    except ValidationError as exc:
        msg = "; ".join(
            str(e.get("msg", "")).removeprefix("Value error, ")
            for e in exc.errors(include_url=False, include_input=False)
        )
        return redirect(request, "/ui/silences", error=msg[:300], **back)
    store = _store(request)
    try:
        await anyio.to_thread.run_sync(
            lambda: store.create_silence(
                body.matchers,
                float(body.ends_at),
                created_by=body.created_by,  # type: ignore[arg-type]
                comment=body.comment,
                starts_at=body.starts_at,
            )
        )
    except ValueError as exc:
        return redirect(request, "/ui/silences", error=str(exc)[:300], **back)
    return redirect(request, "/ui/silences", done="silenced")


@router.post("/silences/{silence_id}/expire")
async def expire_silence(request: Request, silence_id: str) -> Response:
    form = await _form(request)
    refused = _write_guard(request, form)
    if refused:
        return refused
    store = _store(request)
    await anyio.to_thread.run_sync(lambda: data.expire_silence(store, silence_id, time.time()))
    return redirect(request, "/ui/silences", done="expired")


# ---- paste a log ----------------------------------------------------------------------------
@router.get("/classify", response_class=HTMLResponse)
def classify_page(request: Request) -> Response:
    denied = _denied_read(request)
    if denied:
        return denied
    return render(
        request,
        "classify.html",
        nav="classify",
        title="Paste a log",
        reports=None,
        text="",
        fmt="auto",
    )


@router.post("/classify", response_class=HTMLResponse)
async def classify_post(request: Request) -> Response:
    denied = _denied_read(request)
    if denied:
        return denied
    form = await _form(request, MAX_PASTE + MiB)
    if not auth.csrf_ok(request, str(form.get("csrf") or "")):
        return _write_guard(request, form) or _login_redirect(request)
    text = str(form.get("log") or "")
    fmt = str(form.get("format") or "auto")
    if fmt not in ("auto", "raw", "docker", "cri", "fluent"):
        fmt = "auto"
    upload = form.get("file")
    data_bytes = text.encode("utf-8", "surrogatepass")
    name = None
    if isinstance(upload, UploadFile) and upload.filename:
        data_bytes = await upload.read(MAX_PASTE + 1)
        name = upload.filename
    if len(data_bytes) > MAX_PASTE:
        return render(
            request,
            "classify.html",
            status_code=413,
            nav="classify",
            title="Paste a log",
            reports=None,
            text="",
            fmt=fmt,
            error=f"the log is larger than {MAX_PASTE // MiB} MiB",
        )
    if data_bytes.startswith(b"\x1f\x8b"):
        try:
            data_bytes = gunzip(data_bytes, MAX_PASTE)
        except ValueError as exc:
            return render(
                request,
                "classify.html",
                status_code=400,
                nav="classify",
                title="Paste a log",
                reports=None,
                text="",
                fmt=fmt,
                error=f"could not read the gzip file: {exc}",
            )
    if not data_bytes.strip():
        return render(
            request,
            "classify.html",
            status_code=400,
            nav="classify",
            title="Paste a log",
            reports=None,
            text=text,
            fmt=fmt,
            error="paste a log or choose a file first",
        )
    ctx = _ctx(request)
    reports = await anyio.to_thread.run_sync(
        classify_api.classify_bytes,
        ctx,
        data_bytes,
        fmt,
        name or "pasted",
        limiter=classify_api._limiter(),
    )  # noqa: SLF001 - the API's own limiter, shared
    for rep in reports:
        for inc in rep["incidents"] + rep.get("warnings", []):
            inc.setdefault("timeline", rep.get("timeline") or {})
            inc["ladder"] = present.ladder({**inc, "timeline": rep.get("timeline") or {}})
        rep["fact_rows"] = present.facts_rows(rep.get("facts") or {}, rep.get("meta"))
    shown = text if len(text) <= 200_000 else ""
    return render(
        request,
        "classify.html",
        nav="classify",
        title="Paste a log: result",
        reports=reports,
        primary=classify_api.primary_of(reports),
        text=shown,
        fmt=fmt,
        filename=name,
    )


# ---- sign in --------------------------------------------------------------------------------
@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request) -> Response:
    return render(
        request,
        "login.html",
        nav="login",
        title="Sign in",
        next=_safe_next(request.query_params.get("next")),
        why=request.query_params.get("why"),
        https=auth.secure_cookie_ok(request),
        reads_need=auth.login_needed_for_reads(request),
    )


@router.post("/login")
async def login(request: Request) -> Response:
    form = await _form(request)
    target = _safe_next(str(form.get("next") or ""))
    if not auth.csrf_ok(request, str(form.get("csrf") or "")):
        return _write_guard(request, form) or redirect(request, "/ui/login")
    token = str(form.get("token") or "").strip()
    if not auth.token_valid(request, token):
        return render(
            request,
            "login.html",
            status_code=401,
            nav="login",
            title="Sign in",
            next=target,
            why=None,
            https=auth.secure_cookie_ok(request),
            reads_need=auth.login_needed_for_reads(request),
            error="That token is not accepted by this service.",
        )
    response = RedirectResponse(_base(request) + target, status_code=303)
    auth.set_login(response, request, token)
    return _headers(response)


@router.post("/logout")
async def logout(request: Request) -> Response:
    form = await _form(request)
    if not auth.csrf_ok(request, str(form.get("csrf") or "")):
        return _write_guard(request, form) or redirect(request, "/ui/")
    response = redirect(request, "/ui/login", done="logout")
    auth.clear_login(response, request)
    return _headers(response)
