"""Listener start-up policy: who may listen where without a credential.

Start-up policy (:func:`check_auth_config`): with no ``api.token`` the API refuses to start
on a non-loopback address, because anyone who can reach the port could then resolve
incidents, add silences (mute paging) or inject log lines. Set
``SENTINEL_ALLOW_UNAUTHENTICATED=1`` (or ``api.allow_unauthenticated: true`` once the
settings carry it) to run open anyway, e.g. behind an authenticating proxy; a loud warning
is logged then. On loopback an open API is the development default (a warning is logged).

The Fluentd forward port follows the same policy (:func:`check_forward_config`, enforced
again by the server itself): without ``sources.forward.shared_key`` it refuses to listen on
a non-loopback address unless ``sources.forward.allow_unauthenticated`` is set.

An empty or whitespace-only token or key is refused (:func:`blank`): it never means "no auth".
Request-time authentication (bearer tokens) is :mod:`service.api.auth`; this module knows no
web framework, so the forward server and the CLI's ``check-config`` use it too.
"""

from __future__ import annotations

import ipaddress
import logging
import os

from service.config import ApiSettings, ForwardSettings

log = logging.getLogger("vllm_sentinel.api")

ALLOW_ENV = "SENTINEL_ALLOW_UNAUTHENTICATED"


class InsecureConfigError(RuntimeError):
    """No API token while listening beyond loopback, and running open was not allowed."""


def is_loopback(host: str) -> bool:
    h = host.strip().strip("[]").lower()
    if h in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False  # a hostname or a wildcard we cannot vouch for


def unauthenticated_allowed(api: ApiSettings) -> bool:
    if getattr(api, "allow_unauthenticated", False):
        return True
    return os.environ.get(ALLOW_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def blank(secret: str | None) -> bool:
    return secret is not None and not secret.strip()


def check_auth_config(api: ApiSettings) -> None:
    """Refuse an open API on a reachable address unless explicitly allowed; warn otherwise."""
    for name in ("token", "read_token"):
        if blank(getattr(api, name)):
            raise InsecureConfigError(f"api.{name} is empty or whitespace only")
    if api.token or getattr(api, "users", None):
        if api.read_token is None:
            if is_loopback(api.host):
                log.info("API: writes and ingest need the bearer token; reads are open")
            else:
                log.info(
                    "API: listening on %s with no api.read_token: reads need api.token too",
                    api.host,
                )
        return
    if is_loopback(api.host):
        log.warning(
            "API: no api.token set: writes and ingest are unauthenticated "
            "(acceptable on loopback %s for development only)",
            api.host,
        )
        return
    if not unauthenticated_allowed(api):
        raise InsecureConfigError(
            f"refusing to serve the API on {api.host} without api.token "
            f"(set SENTINEL_API__TOKEN, or {ALLOW_ENV}=1 to run open behind your own auth)"
        )
    log.warning("!" * 72)
    log.warning(
        "API: NO AUTHENTICATION on %s: anyone who reaches port %s can resolve "
        "incidents, silence paging and inject logs (%s is set)",
        api.host,
        api.port,
        ALLOW_ENV,
    )
    log.warning("!" * 72)


def check_forward_config(fwd: ForwardSettings | None) -> None:
    """Refuse a forward port without a shared key on a reachable address unless explicitly
    allowed (``sources.forward.allow_unauthenticated``); warn otherwise."""
    if fwd is None:
        return
    if blank(fwd.shared_key):
        raise InsecureConfigError("sources.forward.shared_key is empty or whitespace only")
    if fwd.shared_key:
        return
    if is_loopback(fwd.host):
        log.warning(
            "forward: no sources.forward.shared_key: anyone on this host can send "
            "log lines to %s:%s (acceptable on loopback)",
            fwd.host,
            fwd.port,
        )
        return
    if not fwd.allow_unauthenticated:
        raise InsecureConfigError(
            f"refusing to serve the forward protocol on {fwd.host or '*'}:{fwd.port} without "
            "sources.forward.shared_key (set SENTINEL_SOURCES__FORWARD__SHARED_KEY, bind "
            "127.0.0.1, or set sources.forward.allow_unauthenticated: true behind your own "
            "network policy)"
        )
    log.warning("!" * 72)
    log.warning(
        "forward: NO AUTHENTICATION on %s: anyone who reaches port %s can inject log "
        "lines (sources.forward.allow_unauthenticated is set)",
        fwd.host,
        fwd.port,
    )
    log.warning("!" * 72)
