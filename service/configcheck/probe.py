"""``check-config --probe``: bind the listen ports, connect to every receiver and Kafka
broker. A listen port that is taken by a running vllm-sentinel (its ``/healthz`` says so:
the settings file of a service that is up) is a note, not a problem."""

from __future__ import annotations

import errno
import json
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from service.config import Settings

SERVICE_NAME = "vllm-sentinel"  # what GET /healthz names (service.api.schemas.Health)
TIMEOUT_S = 3.0


@dataclass
class Probed:
    """What probing found: ``problems`` (the service could not start or reach them) and
    ``notes`` (worth knowing, nothing to fix)."""

    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def probe(
    s: Settings, listens: list[tuple[str, str, int]], brokers: list[tuple[str, int]]
) -> Probed:
    """Bind each listen address, connect to each broker and receiver."""
    out = Probed()
    running: str | None = None
    for where, host, port in listens:
        err, in_use = try_bind(host, port)
        if err is None:
            continue
        if in_use and where == "api":
            running = running_sentinel(host, port)
        if in_use and running is not None:
            what = running if where == "api" else "presumably the same running vllm-sentinel"
            out.notes.append(f"{where}: {host}:{port} is in use by {what}")
            continue
        out.problems.append(f"{where}: cannot listen on {host}:{port}: {err}")
    for host, port in brokers:
        err = try_connect(host, port)
        if err:
            out.problems.append(f"sources.kafka.bootstrap: cannot connect to {host}:{port}: {err}")
    for i, r in enumerate(s.receivers):
        url = urlsplit(r.url)
        if not url.hostname or url.hostname.endswith(".invalid"):
            continue  # no host, or the stand-in of a url that could not be read
        try:
            port = url.port or (443 if url.scheme == "https" else 80)
        except ValueError:
            continue  # said already
        err = try_connect(url.hostname, port)
        if err:
            out.problems.append(
                f"receivers[{i}] ({r.name}): cannot connect to {url.hostname}:{port}: {err}"
            )
    return out


def running_sentinel(host: str, port: int) -> str | None:
    """``"a running vllm-sentinel (instance ..., up ...)"`` when ``GET /healthz`` at
    ``host:port`` is a vllm-sentinel's answer, else None."""
    target = "127.0.0.1" if host in ("", "0.0.0.0", "*") else "::1" if host == "::" else host
    if ":" in target:
        target = f"[{target}]"
    try:
        with urllib.request.urlopen(  # noqa: S310 - http to the address being checked
            f"http://{target}:{port}/healthz", timeout=TIMEOUT_S
        ) as resp:
            body = json.loads(resp.read(4096))
    except (OSError, ValueError, urllib.error.URLError):
        return None
    if not isinstance(body, dict) or body.get("status") != "ok":
        return None
    if body.get("service") != SERVICE_NAME and not {"instance_id", "uptime_s"} <= body.keys():
        return None
    up = body.get("uptime_s")
    since = f", up {float(up) / 60:.0f} min" if isinstance(up, int | float) else ""
    return f"a running vllm-sentinel (instance {body.get('instance_id')}{since})"


def try_connect(host: str, port: int, timeout: float = TIMEOUT_S) -> str | None:
    """Why a TCP connection to ``host:port`` fails, or None."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as exc:
        return exc.strerror or str(exc) or type(exc).__name__


def try_bind(host: str, port: int) -> tuple[str | None, bool]:
    """Why listening on ``host:port`` fails (None: it would not), and whether it is because
    the address is in use."""
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except OSError as exc:
        return exc.strerror or str(exc), False
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(addr)
        except OSError as exc:
            return exc.strerror or str(exc), exc.errno == errno.EADDRINUSE
    return None, False
