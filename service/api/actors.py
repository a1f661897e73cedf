"""Who is asking: the named actor behind a request (``api.users``, ``api.token``, a trusted
proxy's user header), independent of the web framework so the dashboard and the Slack door
name people the same way.

* A bearer token is compared with every configured token in constant time
  (``hmac.compare_digest``, no early exit); the token of ``api.users`` entry ``alice`` makes
  the actor ``alice`` with that entry's role.
* ``api.token`` (the single shared token of earlier versions) keeps working: its actor is
  named ``token`` (role write). ``api.read_token``'s actor is ``read-token`` (role read; it
  writes only when nothing else can, as before: a write is never less protected than a read).
* A request whose peer address is in ``api.trusted_proxies`` and that carries
  ``api.user_header`` (``X-Forwarded-User`` by default) is that user: the role of the
  ``api.users`` entry of that name, else ``api.proxy_role``. The header from any other peer
  is ignored (anyone could send it).
* With no credential and no trusted proxy configured at all (a development API on
  loopback) every request is ``anonymous`` with role write. Otherwise a write needs an actor
  whose role is write (``api.users`` with only readers: nobody writes but a proxy's users).
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from service.config import ApiSettings
from service.netguard import blank, is_loopback
from service.store.people import Who

Role = Literal["read", "write"]
MAX_NAME = 100


@dataclass(frozen=True, slots=True)
class Actor:
    """A person (or the shared token) acting through the API, the dashboard or Slack."""

    name: str
    role: Role
    via: str  # user | token | read_token | proxy | open | slack

    @property
    def can_write(self) -> bool:
        return self.role == "write"

    @property
    def who(self) -> Who:
        """The store's name for the actor of a write (its audit record)."""
        return Who(self.name, self.via)


ANONYMOUS = Actor("anonymous", "write", "open")


def _credentials(api: ApiSettings) -> list[tuple[str, Actor]]:
    """Every token the API accepts, with its actor."""
    out = [(u.token, Actor(u.name, u.role, "user")) for u in api.users]
    if api.token is not None:
        out.append((api.token, Actor("token", "write", "token")))
    if api.read_token is not None:
        # the read token writes only when no other credential can (see the module doc)
        alone = api.token is None and not any(u.role == "write" for u in api.users)
        out.append(
            (api.read_token, Actor("read-token", "write" if alone else "read", "read_token"))
        )
    return out


def write_tokens(api: ApiSettings) -> list[str]:
    """The tokens a write accepts (empty: writes are open)."""
    return [t for t, a in _credentials(api) if a.can_write]


def read_tokens(api: ApiSettings) -> list[str]:
    """The tokens a read accepts (empty: reads are open). Reads are open only on loopback
    without ``api.read_token`` (incidents quote log lines), or with no token at all."""
    creds = _credentials(api)
    if api.read_token is None and is_loopback(api.host):
        return []
    return [t for t, _ in creds]


def by_token(api: ApiSettings, given: str | None) -> Actor | None:
    """The actor whose token ``given`` is, compared against every token in constant time."""
    if given is None or blank(given) or len(given) > 4096:
        return None
    g = given.encode()
    found: Actor | None = None
    for token, actor in _credentials(api):  # every token compared: no early exit
        if hmac.compare_digest(g, token.encode()) and not blank(token) and found is None:
            found = actor
    return found


def trusted_peer(api: ApiSettings, peer: str | None) -> bool:
    if not api.trusted_proxies or not peer:
        return False
    try:
        addr = ipaddress.ip_address(peer.strip("[]"))
    except ValueError:
        return False
    return any(addr in net for net in api.trusted_proxies)


def by_proxy(api: ApiSettings, peer: str | None, headers: Mapping[str, str]) -> Actor | None:
    """The user a trusted proxy names in ``api.user_header`` (None from any other peer)."""
    if not trusted_peer(api, peer):
        return None
    name = (headers.get(api.user_header.lower()) or headers.get(api.user_header) or "").strip()
    if not name or len(name) > MAX_NAME or not name.isprintable():
        return None
    role: Role = next((u.role for u in api.users if u.name == name), api.proxy_role)
    return Actor(name, role, "proxy")


def identify(
    api: ApiSettings, token: str | None, peer: str | None, headers: Mapping[str, str]
) -> Actor | None:
    """Who this request is: a trusted proxy's user, else the owner of its token, else
    ``anonymous`` when the API has no credential at all; None: not known."""
    actor = by_proxy(api, peer, headers) or by_token(api, token)
    if actor is None and open_api(api):
        return ANONYMOUS
    return actor


def open_api(api: ApiSettings) -> bool:
    """No credential and no trusted proxy configured: anyone who reaches the API writes
    (allowed on loopback only unless run open on purpose, :mod:`service.netguard`)."""
    return not _credentials(api) and not api.trusted_proxies
