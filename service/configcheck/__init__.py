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

import logging
import socket
from collections.abc import Callable
from fnmatch import fnmatchcase
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import ValidationError

from service.classify.ruletest import RuleLoadError, load_rule_set, run_examples
from service.config import Settings
from service.configcheck.reading import (
    ConfigError,
    load_checked,
    read_yaml,
    validation_problems,
    without_errors,
)
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
__all__ = ["ConfigError", "check_config", "check_report", "link_warnings", "load_checked"]


def check_config(path: str | Path, *, probe: bool = False, text: str | None = None) -> list[str]:
    """Every problem of the settings file ``path`` (with ``SENTINEL_*`` applied; ``text``:
    its content when it was read already, e.g. from stdin)."""
    return check_report(path, probe=probe, text=text)[0]


def check_report(
    path: str | Path, *, probe: bool = False, text: str | None = None
) -> tuple[list[str], list[str]]:
    """The problems and the warnings (settings that work but mislead) of ``path``, in one
    pass: schema problems first, then the rest of what is left once they are dropped."""
    try:
        data = read_yaml(path, text)
    except ConfigError as exc:
        return exc.problems, []
    try:
        settings = Settings(**data)
    except ValidationError as exc:
        rest = without_errors(data, exc)
        schema = validation_problems(exc, data)
        return schema + (semantic_problems(rest, probe=probe) if rest else []), []
    return semantic_problems(settings, probe=probe), link_warnings(settings)


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
    return _receiver_problems(s) + _store_problems(s) + rules_problems(s)


def semantic_problems(s: Settings, *, probe: bool = False) -> list[str]:
    out: list[str] = []
    out += _receiver_problems(s)
    out += _port_problems(s, probe)
    out += _startup_refusals(s)
    out += _store_problems(s)
    out += rules_problems(s)
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


def _port_problems(s: Settings, probe: bool) -> list[str]:
    out: list[str] = []
    listens: list[tuple[str, str, int]] = [("api", s.api.host, s.api.port)]
    if s.sources.forward is not None:
        listens.append(("sources.forward", s.sources.forward.host, s.sources.forward.port))
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
    k = s.sources.kafka
    brokers: list[tuple[str, int]] = []
    if k is not None:
        for entry in str(k.bootstrap).split(","):
            host, _, digits = entry.strip().rpartition(":")
            if not host or not digits.isdigit() or int(digits) not in PORTS:
                out.append(f"sources.kafka.bootstrap: {entry.strip()!r} is not host:port")
            else:
                brokers.append((host.strip("[]"), int(digits)))
        if not k.topics:
            out.append("sources.kafka.topics: no topic to read")
    if probe and not out:
        for where, host, port in listens:
            err = _try_bind(host, port)
            if err:
                out.append(f"{where}: cannot listen on {host}:{port}: {err}")
        for host, port in brokers:
            err = _try_connect(host, port)
            if err:
                out.append(f"sources.kafka.bootstrap: cannot connect to {host}:{port}: {err}")
        for i, r in enumerate(s.receivers):
            url = urlsplit(r.url)
            if url.hostname:
                port = url.port or (443 if url.scheme == "https" else 80)
                err = _try_connect(url.hostname, port)
                if err:
                    out.append(
                        f"receivers[{i}] ({r.name}): cannot connect to {url.hostname}:{port}: {err}"
                    )
    return out


def _try_connect(host: str, port: int, timeout: float = 3.0) -> str | None:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as exc:
        return exc.strerror or str(exc) or type(exc).__name__


def _try_bind(host: str, port: int) -> str | None:
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except OSError as exc:
        return exc.strerror or str(exc)
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(addr)
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


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
