"""Bearer-token authentication.

* Writes and ingest (``require_write``) need ``Authorization: Bearer <api.token>`` when
  ``api.token`` is set. When only ``api.read_token`` is set, writes need that token: a write
  is never less protected than a read.
* Reads (``require_read``) need ``api.read_token`` (or ``api.token``) when
  ``api.read_token`` is set. Without one, reads need ``api.token`` whenever ``api.host`` is
  not loopback (incidents quote log lines: nobody who can merely reach the port reads
  them); only on loopback, or with no token at all (an API explicitly run open, see
  :mod:`service.netguard`), are reads open.
* ``/healthz``, ``/readyz``, ``/metrics`` and the OpenAPI docs are always open (probes and
  Prometheus scrape them; they carry no incident data).

Tokens are compared in constant time (``hmac.compare_digest``); a missing or wrong token
gets ``401`` with ``WWW-Authenticate: Bearer``.

Start-up policy (who may listen where without a token) is :mod:`service.netguard`.

An empty or whitespace-only token or key is refused by the settings validation and, should
one get past it, by :func:`check_auth_config` and at request time: it never means "no auth"
and never matches a credential. A whitespace-only bearer credential is always refused.
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.config import ApiSettings
from service.netguard import blank, is_loopback

_bearer = HTTPBearer(auto_error=False, description="api.token (writes, ingest) or api.read_token")


def _settings(request: Request) -> ApiSettings:
    api: ApiSettings = request.app.state.ctx.settings.api
    return api


def _matches(given: str, accepted: list[str]) -> bool:
    ok = False
    g = given.encode()
    for token in accepted:  # compare against every token: no early exit on a match
        ok |= hmac.compare_digest(g, token.encode()) and not blank(token)
    return ok


def _check(creds: HTTPAuthorizationCredentials | None, accepted: list[str]) -> None:
    if not accepted:
        return
    if (
        creds is None
        or creds.scheme.lower() != "bearer"
        or not creds.credentials
        or not creds.credentials.strip()
    ):
        raise HTTPException(
            status_code=401, detail="missing bearer token", headers={"WWW-Authenticate": "Bearer"}
        )
    if not _matches(creds.credentials, accepted):
        raise HTTPException(
            status_code=401,
            detail="invalid bearer token",
            headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
        )


def write_tokens(api: ApiSettings) -> list[str]:
    # "is not None": a blank token that got past validation locks the door, never opens it
    if api.token is not None:
        return [api.token]
    return [api.read_token] if api.read_token is not None else []


def read_tokens(api: ApiSettings) -> list[str]:
    """The tokens a read accepts (empty: reads are open; see the module doc)."""
    if api.read_token is None:
        if api.token is not None and not is_loopback(api.host):
            return [api.token]
        return []
    return [api.read_token] + ([api.token] if api.token is not None else [])


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
