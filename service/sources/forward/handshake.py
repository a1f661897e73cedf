"""Server side of the Forward Protocol v1 shared-key handshake (HELO / PING / PONG).

As in the spec and fluentd's ``in_forward.rb`` (``generate_helo``/``check_ping``/
``generate_pong``)::

    server: ["HELO", {"nonce": <16 random bytes>, "auth": <user salt or "">, "keepalive": true}]
    client: ["PING", client_hostname, shared_key_salt,
             sha512_hex(shared_key_salt + client_hostname + nonce + shared_key),
             username or "", sha512_hex(auth_salt + username + password) or ""]
    server: ["PONG", true, "", server_hostname,
             sha512_hex(shared_key_salt + server_hostname + nonce + shared_key)]
         or ["PONG", false, <reason>, "", ""] and close.

Values may arrive as msgpack bin or str (Fluent Bit packs its random salt as str); both are
compared as raw bytes.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from service.ingest.msgpack_events import to_bytes


def hexdigest(*parts: bytes) -> str:
    """sha512 hex digest of the concatenated parts."""
    digest = hashlib.sha512()
    for part in parts:
        digest.update(part)
    return digest.hexdigest()


@dataclass
class Handshake:
    """One connection's handshake state: build HELO, check PING, build PONG."""

    shared_key: str
    self_hostname: str
    users: Mapping[str, str] | None = None  # username -> password; None = no user auth
    nonce: bytes = field(default_factory=lambda: os.urandom(16))
    auth_salt: bytes = field(default_factory=lambda: os.urandom(16))

    def helo(self) -> list[Any]:
        """The server's opening message."""
        auth = self.auth_salt if self.users else b""
        return ["HELO", {"nonce": self.nonce, "auth": auth, "keepalive": True}]

    def check_ping(self, ping: Any) -> tuple[bool, str, bytes]:
        """``(ok, reason, shared_key_salt)`` for the client's PING."""
        if type(ping) is not list or len(ping) != 6 or ping[0] != "PING":
            return False, "invalid ping message", b""
        hostname, salt, digest = to_bytes(ping[1]), to_bytes(ping[2]), to_bytes(ping[3])
        if hostname is None or salt is None or digest is None:
            return False, "invalid ping message", b""
        key = self.shared_key.encode()
        expected = hexdigest(salt, hostname, self.nonce, key).encode()
        if not hmac.compare_digest(expected, digest):
            return False, "shared_key mismatch", b""
        if self.users:
            username, password_digest = to_bytes(ping[4]), to_bytes(ping[5])
            password = self.users.get(username.decode("utf-8", "replace")) if username else None
            if password is None or password_digest is None or username is None:
                return False, "username/password mismatch", b""
            expected = hexdigest(self.auth_salt, username, password.encode()).encode()
            if not hmac.compare_digest(expected, password_digest):
                return False, "username/password mismatch", b""
        return True, "", salt

    def pong(self, ok: bool, reason: str, salt: bytes) -> list[Any]:
        """The server's answer to PING."""
        if not ok:
            return ["PONG", False, reason, "", ""]
        host = self.self_hostname.encode()
        digest = hexdigest(salt, host, self.nonce, self.shared_key.encode())
        return ["PONG", True, "", self.self_hostname, digest]
