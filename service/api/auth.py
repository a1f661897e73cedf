"""Bearer-token authentication.

* Writes and ingest (``require_write``) need ``Authorization: Bearer <api.token>`` when
  ``api.token`` is set. When only ``api.read_token`` is set, writes need that token: a write
  is never less protected than a read.
* Reads (``require_read``) need ``api.read_token`` (or ``api.token``) only when
  ``api.read_token`` is set; otherwise reads are open.
* ``/healthz``, ``/readyz``, ``/metrics`` and the OpenAPI docs are always open (probes and
  Prometheus scrape them; they carry no incident data).

Tokens are compared in constant time (``hmac.compare_digest``); a missing or wrong token
gets ``401`` with ``WWW-Authenticate: Bearer``.

Start-up policy (:func:`check_auth_config`): with no ``api.token`` the API refuses to start
on a non-loopback address, because anyone who can reach the port could then resolve
incidents, add silences (mute paging) or inject log lines. Set
``SENTINEL_ALLOW_UNAUTHENTICATED=1`` (or ``api.allow_unauthenticated: true`` once the
settings carry it) to run open anyway, e.g. behind an authenticating proxy; a loud warning
is logged then. On loopback an open API is the development default (a warning is logged).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.config import ApiSettings

log = logging.getLogger("vllm_sentinel.api")

ALLOW_ENV = "SENTINEL_ALLOW_UNAUTHENTICATED"
_bearer = HTTPBearer(auto_error=False, description="api.token (writes, ingest) or api.read_token")


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


def check_auth_config(api: ApiSettings) -> None:
    """Refuse an open API on a reachable address unless explicitly allowed; warn otherwise."""
    if api.token:
        if api.read_token is None:
            log.info("API: writes and ingest need the bearer token; reads are open")
        return
    if is_loopback(api.host):
        log.warning("API: no api.token set: writes and ingest are unauthenticated "
                    "(acceptable on loopback %s for development only)", api.host)
        return
    if not unauthenticated_allowed(api):
        raise InsecureConfigError(
            f"refusing to serve the API on {api.host} without api.token "
            f"(set SENTINEL_API__TOKEN, or {ALLOW_ENV}=1 to run open behind your own auth)")
    log.warning("!" * 72)
    log.warning("API: NO AUTHENTICATION on %s: anyone who reaches port %s can resolve "
                "incidents, silence paging and inject logs (%s is set)",
                api.host, api.port, ALLOW_ENV)
    log.warning("!" * 72)


def _settings(request: Request) -> ApiSettings:
    return request.app.state.ctx.settings.api


def _matches(given: str, accepted: list[str]) -> bool:
    ok = False
    g = given.encode()
    for token in accepted:  # compare against every token: no early exit on a match
        ok |= hmac.compare_digest(g, token.encode())
    return ok


def _check(creds: HTTPAuthorizationCredentials | None, accepted: list[str]) -> None:
    if not accepted:
        return
    if creds is None or creds.scheme.lower() != "bearer" or not creds.credentials:
        raise HTTPException(status_code=401, detail="missing bearer token",
                            headers={"WWW-Authenticate": "Bearer"})
    if not _matches(creds.credentials, accepted):
        raise HTTPException(status_code=401, detail="invalid bearer token",
                            headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})


def write_tokens(api: ApiSettings) -> list[str]:
    if api.token:
        return [api.token]
    return [api.read_token] if api.read_token else []


def read_tokens(api: ApiSettings) -> list[str]:
    if not api.read_token:
        return []
    return [api.read_token] + ([api.token] if api.token else [])


def require_write(
    request: Request,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    _check(creds, write_tokens(_settings(request)))


def require_read(
    request: Request,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    _check(creds, read_tokens(_settings(request)))


WriteAuth = Depends(require_write)
ReadAuth = Depends(require_read)
