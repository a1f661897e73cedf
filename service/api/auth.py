"""Bearer-token authentication; who each request is comes from :mod:`service.api.actors`.

* Writes and ingest (``require_write``) need ``Authorization: Bearer <token>`` of a user
  with role write (``api.users``) or ``api.token``, or a trusted proxy's user, whenever any
  credential is configured; the route gets the :class:`~service.api.actors.Actor` (every
  write is recorded under its name, ``GET /audit``). When only ``api.read_token`` is set,
  writes need that token: a write is never less protected than a read.
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

from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.api.actors import Actor, identify, read_tokens, write_tokens
from service.config import ApiSettings

__all__ = ["ReadAuth", "WriteAuth", "Writer", "read_tokens", "write_tokens"]

_bearer = HTTPBearer(
    auto_error=False,
    description="a token of api.users, api.token (writes, ingest) or api.read_token",
)


def _settings(request: Request) -> ApiSettings:
    api: ApiSettings = request.app.state.ctx.settings.api
    return api


def _refuse(creds: HTTPAuthorizationCredentials | None) -> HTTPException:
    if (
        creds is None
        or creds.scheme.lower() != "bearer"
        or not creds.credentials
        or not creds.credentials.strip()
    ):
        return HTTPException(
            status_code=401, detail="missing bearer token", headers={"WWW-Authenticate": "Bearer"}
        )
    return HTTPException(
        status_code=401,
        detail="invalid bearer token",
        headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
    )


def _who(request: Request, creds: HTTPAuthorizationCredentials | None) -> Actor | None:
    token = creds.credentials if creds is not None and creds.scheme.lower() == "bearer" else None
    peer = request.client.host if request.client is not None else None
    return identify(_settings(request), token, peer, request.headers)


def require_write(
    request: Request,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Actor:
    """The actor of a write (401 without a credential that may write)."""
    actor = _who(request, creds)
    if actor is None or not actor.can_write:
        raise _refuse(creds)
    return actor


def require_read(
    request: Request,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Actor | None:
    """The actor of a read; None when reads are open and the request named nobody."""
    actor = _who(request, creds)
    if actor is None and read_tokens(_settings(request)):
        raise _refuse(creds)
    return actor


WriteAuth = Depends(require_write)
ReadAuth = Depends(require_read)
Writer = Annotated[Actor, Depends(require_write)]  # a route parameter: who writes
