"""Slack incoming webhook: Block Kit message with a ``text`` fallback, within Slack's limits
(≤50 blocks, header ≤150 chars, section text ≤3000, ≤10 fields of ≤2000), ending in the
buttons a Slack app answers (Acknowledge, Silence 4 h, Open; ``POST /slack/actions``)."""

from __future__ import annotations

import json
from typing import Any

from service.config import ReceiverSettings
from service.incidents.codec import JsonObject
from service.incidents.incident_json import IncidentExtra, RelatedFinding
from service.notify.alert import Alert, HttpRequest, cut, fleet_of, where_it_ran

MAX_BLOCKS = 50
HEADER_MAX = 150
SECTION_MAX = 3000
FIELD_MAX = 2000
TEXT_MAX = 3000
EVIDENCE_LINES = 25
RELATED_MAX = 5
ICON = {"opened": "🔴", "updated": "🟠", "acknowledged": "👀", "resolved": "✅"}
LABEL = {
    "opened": "FIRING",
    "updated": "UPDATED",
    "acknowledged": "ACKNOWLEDGED",
    "resolved": "RESOLVED",
}
# the buttons' action ids (POST /slack/actions reads them; each value is the incident id)
ACK_ACTION = "ack"
SILENCE_ACTION = "silence_4h"
OPEN_ACTION = "open"
FACTS = (
    ("image", "Image"),
    ("vllm_version", "vLLM"),
    ("driver_version", "Driver"),
    ("driver_cuda", "CUDA (driver)"),
    ("image_cuda", "CUDA (image)"),
    ("gpu_model", "GPU"),
    ("compute_capability", "Compute capability"),
    ("tensor_parallel_size", "TP"),
)


def build(alert: Alert, cfg: ReceiverSettings, now: float) -> HttpRequest:
    return HttpRequest(
        cfg.url, json.dumps(message(alert)).encode(), {"Content-Type": "application/json"}
    )


def message(alert: Alert, note: str | None = None) -> JsonObject:
    """The message; ``note`` (what a button did, as a Slack app updates it) before the
    buttons."""
    s = alert.view()
    meta, facts = s["meta"], s["facts"]
    label = LABEL.get(alert.event, alert.event.upper())
    if s["status"] == "resolved":
        label = LABEL["resolved"]
    icon = ICON["resolved"] if s["status"] == "resolved" else ICON.get(alert.event, "🔴")
    title = f"{icon} {label} · {s['tier']} / {s['category']} @ {s['stage']}"
    if alert.event == "acknowledged" and alert.ack is not None:
        title = f"{icon} {label} by {alert.ack.by} · {s['tier']} / {s['category']}"
    where, fleet = where_it_ran(s), fleet_of(s)

    blocks: list[JsonObject | None] = [  # None: an empty section, dropped below
        {
            "type": "header",
            "text": {"type": "plain_text", "text": cut(title, HEADER_MAX), "emoji": True},
        },
        _fields(
            [
                ("Fleet" if fleet else "Pod", where),
                ("Node", meta.get("node")),
                ("Container", meta.get("container")),
                ("Severity", s["severity"]),
                ("Acknowledged by", alert.ack.by if alert.ack else None),
                ("Assignee", alert.assignee),
                ("Restarts", str(s["restarts"]) if s["restarts"] else None),
                ("Confidence", f"{s['confidence']:.2f} ({s['method']})"),
            ]
        ),
        _section("*Root cause*", s["line"], code=True),
    ]
    if explanation := s.get("explanation"):
        blocks.append(_section("*Why*", explanation))
    fact_fields = [(name, facts.get(key)) for key, name in FACTS]
    if any(v for _, v in fact_fields):
        blocks.append(_fields(fact_fields))
    if detail := s.get("detail"):
        blocks.append(_section("*What was seen*", detail))
    if s.get("remediation"):
        blocks.append(_section("*First move*", s["remediation"]))
    blocks.extend(_judgements(s.get("extra") or {}))
    if s["status"] == "resolved" and (resolution := s.get("resolution")):
        blocks.append(_section("*Resolution*", resolution))
    evidence = s["evidence"][-EVIDENCE_LINES:]
    if evidence:
        blocks.append(_section("*Evidence*", "\n".join(evidence), code=True, tail=True))
    related = [r for r in s["related"] if r.get("rule")][:RELATED_MAX]
    if related:
        blocks.append(
            {
                "type": "context",
                "elements": [
                    {
                        "type": "mrkdwn",
                        "text": cut(
                            "Also seen: " + ", ".join(_also(r, s["category"]) for r in related),
                            SECTION_MAX,
                        ),
                    }
                ],
            }
        )
    blocks.append(
        {
            "type": "section",
            "text": {
                "type": "mrkdwn",
                "text": cut(
                    f"<{alert.url}|Open incident {alert.id}> · rule `{_esc(s['rule'] or s['method'])}`"
                    f" · stream `{_esc(s['stream'])}`",
                    SECTION_MAX,
                ),
            },
        }
    )
    if note:
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": _esc(note)}]})
    shown = [b for b in blocks if b][: MAX_BLOCKS - 1] + [buttons(alert)]
    by = f" by {alert.ack.by}" if alert.event == "acknowledged" and alert.ack else ""
    text = cut(
        f"[{label}{by}] {s['tier']}/{s['category']} at {s['stage']} on {where}: {s['line']}",
        TEXT_MAX,
    )
    return {"text": text, "blocks": shown}


def buttons(alert: Alert) -> JsonObject:
    """Acknowledge (while nobody has), Silence 4 h (while open) and Open: a Slack app's
    interactivity posts the first two to ``POST /slack/actions``."""
    iid = alert.id
    elements: list[JsonObject] = []
    open_ = alert.incident.get("status") != "resolved"
    if open_ and alert.ack is None:
        elements.append(_button("Acknowledge", ACK_ACTION, iid, style="primary"))
    if open_:
        elements.append(_button("Silence 4 h", SILENCE_ACTION, iid))
    elements.append({**_button("Open", OPEN_ACTION, iid), "url": alert.url})
    return {"type": "actions", "block_id": f"sentinel:{iid}", "elements": elements}


def _button(text: str, action_id: str, value: str, style: str | None = None) -> JsonObject:
    b: JsonObject = {
        "type": "button",
        "text": {"type": "plain_text", "text": text},
        "action_id": action_id,
        "value": value,
    }
    if style:
        b["style"] = style
    return b


def _also(r: RelatedFinding, cause: str) -> str:
    """A related line: a cascade (or symptom) of the root cause is said so, never named by
    a category of its own (an engine that failed to start is not a second failure)."""
    if r.get("role") in ("cascade", "symptom"):
        return f"{_esc(r['role'])} of {_esc(cause)} (`{_esc(r.get('rule') or '')}`)"
    return f"{_esc(r['category'])} ({_esc(r.get('role'))})"


def _esc(text: Any) -> str:
    """Slack mrkdwn control characters."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _section(title: str, body: str, *, code: bool = False, tail: bool = False) -> JsonObject:
    body = _esc(body)
    if code:
        body = body.replace("```", "ˋˋˋ")
        room = SECTION_MAX - len(title) - len("\n``````")
        if len(body) > room:  # keep the end of evidence, the start of a root-cause line
            body = "…" + body[-(room - 1) :] if tail else cut(body, room)
        text = f"{title}\n```{body}```"
    else:
        text = cut(f"{title}: {body}", SECTION_MAX)
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def _fields(pairs: list[tuple[str, Any]]) -> JsonObject | None:
    fields = [
        {"type": "mrkdwn", "text": cut(f"*{name}*\n{_esc(value)}", FIELD_MAX)}
        for name, value in pairs
        if value not in (None, "")
    ][:10]
    return {"type": "section", "fields": fields} if fields else None


def _judgements(extra: IncidentExtra) -> list[JsonObject | None]:
    """Crash loop, last good vs now, the playbook (owner, evidence, the compatibility
    decision) and fleet membership, as compact sections."""
    out: list[JsonObject | None] = []
    if extra.get("note"):
        out.append(_section("*Crash loop*", extra["note"]))
    changed = extra.get("changed_since_last_good") or {}
    if changed:
        out.append(
            _section(
                "*Changed since the last healthy start*",
                "\n".join(f"• {k}: {a} → {b}" for k, (a, b) in list(changed.items())[:12]),
            )
        )
    fleet = extra.get("fleet")
    if fleet:
        out.append(
            _section(
                "*Fleet*",
                f"{fleet.get('count')} workloads share {fleet.get('key')}={fleet.get('value')}",
            )
        )
    pb = extra.get("playbook")
    if pb and (decision := pb.get("decision")):
        out.append(
            _section(
                "*Decision*",
                "\n".join(
                    f"• {d['option']}: needs {', '.join(d.get('preconditions', []))}"
                    + ("" if d.get("available", True) else " (not available for this image)")
                    for d in decision
                ),
            )
        )
    if pb and (evidence := pb.get("evidence")):
        owner = f"Owner: {pb['owner']}. " if pb.get("owner") else ""
        out.append(_section("*Collect*", owner + "; ".join(evidence[:8])))
    return out
