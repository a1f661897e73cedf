"""Settings files checked before they are used: one clear line per problem, never a
traceback (``vllm-sentinel check-config FILE``, and every command that reads ``--config``).

Beyond the settings schema (unknown keys, wrong types, ``X_env`` / ``X_file`` that cannot be
read) it checks what only shows at run time otherwise: receiver matchers whose values are not
in the taxonomy, receivers without what their type needs (a PagerDuty routing key, an
http(s) URL), ports that no client could reach (0, out of range, the API and forward on the
same address), the start-up refusals (an open API or forward port beyond loopback), the store
URL and the extra rule directories. ``probe=True`` also connects to every receiver and Kafka
broker and binds the listen ports. Problems never show a secret's value. Schema problems
and the rest come in one pass (the rest checked with the refused keys dropped); unknown keys
name the nearest known one. Warnings (:func:`link_warnings`) are settings that work but
mislead: alert links nobody who gets the page can open.
Reading a file and the schema's refusals in words: :mod:`service.configcheck.reading`.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field as default
from fnmatch import fnmatchcase
from pathlib import Path
from urllib.parse import urlsplit

from service.classify.ruletest import RuleLoadError, load_rule_set, run_examples
from service.config import Settings
from service.configcheck.probe import Probed
from service.configcheck.probe import probe as probe_settings
from service.configcheck.reading import ConfigError, load_checked, read_yaml, settle
from service.labels import validate
from service.netguard import (
    InsecureConfigError,
    check_auth_config,
    check_forward_config,
    is_loopback,
)
from service.store.engine import normalise_url
from service.taxonomy import CATEGORIES, STAGES, TIERS

SEVERITIES = ("critical", "warning")
STATUSES = ("open", "resolved")
VOCABULARY = {
    "tier": TIERS,
    "category": CATEGORIES,
    "stage": STAGES,
    "severity": SEVERITIES,
    "status": STATUSES,
}
PORTS = range(1, 65536)
__all__ = [
    "CheckReport",
    "ConfigError",
    "check_config",
    "check_report",
    "link_warnings",
    "load_checked",
]


@dataclass
class CheckReport:
    """What checking a settings file found: ``problems`` (the service would refuse it or
    misbehave), ``warnings`` (settings that work but mislead), ``notes`` (worth knowing,
    nothing to fix: a port in use by this very service, running)."""

    problems: list[str]
    warnings: list[str] = default(default_factory=list)
    notes: list[str] = default(default_factory=list)


def check_config(path: str | Path, *, probe: bool = False, text: str | None = None) -> list[str]:
    """Every problem of the settings file ``path`` (with ``SENTINEL_*`` applied; ``text``:
    its content when it was read already, e.g. from stdin)."""
    return check_report(path, probe=probe, text=text).problems


def check_report(path: str | Path, *, probe: bool = False, text: str | None = None) -> CheckReport:
    """Everything ``path`` holds, in one pass: the schema's problems first (over as many
    passes of the schema as it takes, :func:`~service.configcheck.reading.settle`), then the
    rest of what is found once they are dropped."""
    try:
        data = read_yaml(path, text)
    except ConfigError as exc:
        return CheckReport(exc.problems)
    schema, settings = settle(data)
    if settings is None:
        return CheckReport(schema)
    report = CheckReport(schema + semantic_problems(settings), link_warnings(settings))
    if probe:
        probed = _probe(settings)
        report.problems += probed.problems
        report.notes += probed.notes
    return report


PLACEHOLDER_DOMAINS = ("example.com", "example.org", "example.net", "example", "invalid")
IN_CLUSTER_DOMAINS = ("svc", "cluster.local")


def _under(host: str, domains: tuple[str, ...]) -> bool:
    return host in domains or host.endswith(tuple(f".{d}" for d in domains))


def link_warnings(s: Settings) -> list[str]:
    """Alert links nobody who gets the page can open: ``notify.external_url`` on loopback
    (or unset) while the API listens beyond it, a placeholder domain, in-cluster DNS."""
    url = s.notify.external_url
    host = (urlsplit(url).hostname or "").lower().rstrip(".")
    where = f"notify.external_url: {url}"
    if not host:
        return [f"{where}: not a URL with a host; alert links will not open"]
    if _under(host, PLACEHOLDER_DOMAINS):
        return [f"{where}: is a placeholder; set the address people open the dashboard at"]
    if _under(host, IN_CLUSTER_DOMAINS):
        return [
            f"{where}: is in-cluster DNS a laptop or phone cannot open; "
            "set the address people open the dashboard at (an Ingress)"
        ]
    if is_loopback(host) and not is_loopback(s.api.host):
        unset = "" if "external_url" in s.notify.model_fields_set else " (unset: from api.host)"
        return [
            f"{where}{unset}: is loopback while the API listens on {s.api.host}; "
            "alert links will only open on this machine"
        ]
    return []


def serve_problems(s: Settings) -> list[str]:
    """What ``serve`` refuses to start with beyond the schema and its start-up checks."""
    return _receiver_problems(s) + stage_problems(s) + _store_problems(s) + rules_problems(s)


def semantic_problems(s: Settings) -> list[str]:
    out: list[str] = []
    out += _receiver_problems(s)
    out += _port_problems(s)
    out += _startup_refusals(s)
    out += stage_problems(s)
    out += _store_problems(s)
    out += rules_problems(s)
    return out


def stage_problems(s: Settings) -> list[str]:
    """Stage names the settings key by (``stall.deadlines_s``) that are not stages: a
    deadline nobody would ever apply."""
    out = []
    for name in s.stall.deadlines_s:
        if name not in STAGES:
            near = difflib.get_close_matches(name, STAGES, n=1)
            hint = f"did you mean {near[0]}? " if near else ""
            out.append(f"stall.deadlines_s.{name}: not a stage ({hint}one of: {', '.join(STAGES)})")
    return out


def _receiver_problems(s: Settings) -> list[str]:

    out: list[str] = []
    seen: set[str] = set()
    for i, r in enumerate(s.receivers):
        where = f"receivers[{i}] ({r.name})"
        if r.name in seen:
            out.append(f"{where}: another receiver has the name {r.name!r}")
        seen.add(r.name)
        url = urlsplit(r.url)
        if url.scheme not in ("http", "https") or not url.hostname:
            out.append(f"{where}: url must be an http:// or https:// URL with a host")
        else:
            try:
                port = url.port
            except ValueError:
                out.append(f"{where}: url has an invalid port")
            else:
                if port is not None and port not in PORTS:
                    out.append(f"{where}: url port {port} is not a reachable port")
        if r.type == "pagerduty" and not (r.routing_key or "").strip():
            out.append(
                f"{where}: a pagerduty receiver needs routing_key "
                "(or routing_key_env / routing_key_file)"
            )
        if r.type == "webhook" and r.secret is not None and not r.secret.strip():
            out.append(f"{where}: secret is empty; leave it unset for unsigned webhooks")
        for field, values in (r.match or {}).items():
            try:
                validate({field: values})
            except ValueError as exc:
                out.append(f"{where}: match: {exc}")
                continue
            vocab = VOCABULARY.get(field)
            if vocab is None:
                continue  # namespaces, pods, labels ...: any value
            for v in [values] if isinstance(values, str) else values:
                if not any(str(v) == word or fnmatchcase(word, str(v)) for word in vocab):
                    out.append(
                        f"{where}: match.{field}: {v!r} is not a {field} "
                        f"(one of: {', '.join(vocab)})"
                    )
    return out


def _listens(s: Settings) -> list[tuple[str, str, int]]:
    listens: list[tuple[str, str, int]] = [("api", s.api.host, s.api.port)]
    if s.sources.forward is not None:
        listens.append(("sources.forward", s.sources.forward.host, s.sources.forward.port))
    return listens


def _brokers(s: Settings) -> tuple[list[tuple[str, int]], list[str]]:
    """The Kafka brokers as (host, port), and the entries that are not host:port."""
    brokers: list[tuple[str, int]] = []
    bad: list[str] = []
    if s.sources.kafka is not None:
        for entry in str(s.sources.kafka.bootstrap).split(","):
            host, _, digits = entry.strip().rpartition(":")
            if not host or not digits.isdigit() or int(digits) not in PORTS:
                bad.append(f"sources.kafka.bootstrap: {entry.strip()!r} is not host:port")
            else:
                brokers.append((host.strip("[]"), int(digits)))
    return brokers, bad


def _port_problems(s: Settings) -> list[str]:
    out: list[str] = []
    listens = _listens(s)
    for where, _host, port in listens:
        if port not in PORTS:
            out.append(f"{where}.port: {port} is not a port clients can reach (1-65535)")
    if (
        len(listens) == 2
        and listens[0][2] == listens[1][2]
        and listens[0][2] in PORTS
        and (listens[0][1] == listens[1][1] or "0.0.0.0" in (listens[0][1], listens[1][1]))
    ):
        out.append(f"sources.forward.port: {listens[1][2]} is also api.port")
    out += _brokers(s)[1]
    if s.sources.kafka is not None and not s.sources.kafka.topics:
        out.append("sources.kafka.topics: no topic to read")
    return out


def _probe(s: Settings) -> Probed:
    """Probe what can be probed, whatever else is wrong (ports no client can reach aside)."""
    listens = [(w, h, p) for w, h, p in _listens(s) if p in PORTS]
    return probe_settings(s, listens, _brokers(s)[0])


def _startup_refusals(s: Settings) -> list[str]:

    out: list[str] = []
    quiet = logging.getLogger("vllm_sentinel.api")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # the warnings serve prints are not problems
    try:
        checks: list[Callable[[], None]] = [
            lambda: check_auth_config(s.api),
            lambda: check_forward_config(s.sources.forward),
        ]
        for check in checks:
            try:
                check()
            except InsecureConfigError as exc:
                out.append(str(exc))
    finally:
        quiet.setLevel(level)
    return out


def _store_problems(s: Settings) -> list[str]:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(normalise_url(s.store.url))
    except (ArgumentError, ValueError):
        return ["store.url: not a database URL (sqlite:///path or postgresql://...)"]
    if url.get_backend_name() not in ("sqlite", "postgresql"):
        return [f"store.url: {url.get_backend_name()} is not supported (sqlite or postgresql)"]
    return []


def rules_problems(s: Settings) -> list[str]:
    """The extra rule directories load, every id named exists, every added rule passes its
    own examples."""

    try:
        rule_set = load_rule_set(s.rules.dirs, s.rules.disabled, s.rules.overrides)
    except RuleLoadError as exc:
        return [f"rules: {p}" for p in exc.problems]
    if not s.rules.dirs and not s.rules.overrides:
        return []
    return [f"rules: {p}" for p in run_examples(rule_set, only_added=True)]
