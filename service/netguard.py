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
Beyond loopback a token or key must also be strong (:func:`weakness`): at least 16 random
bytes (32 hex or 22 base64 characters), not of low entropy (repeated, few distinct
characters), not an ``<...>`` placeholder nor an example value of the repository's own
files (:data:`EXAMPLE_VALUES`); else the service refuses to start, naming the setting, and
``check-config`` says the same. On loopback a weak one is only warned about.
Request-time authentication (bearer tokens) is :mod:`service.api.auth`; this module knows no
web framework, so the forward server and the CLI's ``check-config`` use it too.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import os
import string
from collections import Counter

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


MIN_BITS = 128  # 16 random bytes
MIN_SHANNON_BITS = 64  # the characters as drawn: "aaaa...", "abab..." hold far less
# values the repository's own examples and docs show (deploy/, README.md, docs/); a
# test holds this list to those files
EXAMPLE_VALUES = frozenset(
    {
        "...",
        "changeme",
        "change-me",
        "replace-me",
        "secret",
        "password",
        "token",
        "example",
        "your-token",
        "my-token",
        "s3cr3t",
    }
)
_HEX = frozenset(string.hexdigits)
_BASE64 = frozenset(string.ascii_letters + string.digits + "+/=_-")


def weakness(secret: str) -> str | None:
    """Why ``secret`` (a token or shared key) is too weak to guard a port beyond
    loopback, or None when it is not: a placeholder, an example value, shorter than 16
    random bytes, or of low entropy. Never quotes the value."""
    v = secret.strip()
    if v.startswith("<") or v.endswith(">") or ("<" in v and ">" in v):
        return "is a placeholder (<...>): set a random value"
    if v.lower() in EXAMPLE_VALUES or "example" in v.lower():
        return "is an example value from the documentation: set a random value"
    chars = set(v)
    per_char = 4.0 if chars <= _HEX else 6.0 if chars <= _BASE64 else math.log2(94)
    if len(v) * per_char < MIN_BITS:
        return (
            f"is too short ({len(v)} characters; at least 16 random bytes: "
            "32 hex or 22 base64 characters, e.g. `openssl rand -hex 32`)"
        )
    counts = Counter(v).values()
    shannon = -sum(c / len(v) * math.log2(c / len(v)) for c in counts) * len(v)
    if shannon < MIN_SHANNON_BITS or (v + v).find(v, 1) < len(v):
        return "has low entropy (repeated or few distinct characters): set a random value"
    return None


def check_strength(name: str, secret: str | None, host: str) -> None:
    """Refuse a weak ``secret`` (the setting ``name``) guarding a port on ``host`` beyond
    loopback; warn on loopback."""
    why = None if secret is None or blank(secret) else weakness(secret)
    if why is None:
        return
    if is_loopback(host):
        log.warning("%s %s (acceptable on loopback %s only)", name, why, host)
        return
    raise InsecureConfigError(f"{name} {why}; refusing to listen on {host}")


def check_auth_config(api: ApiSettings) -> None:
    """Refuse an open API on a reachable address unless explicitly allowed; warn otherwise."""
    for name in ("token", "read_token"):
        if blank(getattr(api, name)):
            raise InsecureConfigError(f"api.{name} is empty or whitespace only")
        check_strength(f"api.{name}", getattr(api, name), api.host)
    for user in getattr(api, "users", None) or ():
        check_strength(f"api.users[{user.name}].token", user.token, api.host)
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
    check_strength("sources.forward.shared_key", fwd.shared_key, fwd.host)
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
