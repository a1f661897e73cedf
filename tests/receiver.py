"""A real HTTP receiver for notification tests: a threaded ``http.server`` on a free local
port that records every request and can be told to fail (status code) or hang for a while.

    with Receiver() as rx:
        rx.fail(500, for_s=2.0)        # 500 for two seconds, then 200
        rx.hang(delay_s=3.0, count=1)  # next request: answer 504 after 3 s (client times out)
        ...
        rx.wait_for(3, timeout=10)
        rx.accepted()                  # requests answered 2xx
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(slots=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float  # time.time() when the body was read
    status: int  # what the receiver answered

    def json(self) -> Any:
        return json.loads(self.body)

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers.items() if k.lower() == name.lower()), None)


class Receiver:
    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._fail_status = 500
        self._fail_until = 0.0
        self._fail_count = 0
        self._hang_delay = 0.0
        self._hang_count = 0
        self._hang_until = 0.0
        self.ok_status = 200
        self.ok_body = b"ok"
        self.extra_headers: dict[str, str] = {}
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                # headers and body go out in two writes: without this, Nagle + delayed ACK
                # hold every response ~40 ms and a keep-alive client's next request with it
                self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def do_POST(self) -> None:  # noqa: N802 - http.server API
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                status, delay = receiver._decide()
                receiver._record(
                    Request(
                        "POST", self.path, dict(self.headers.items()), body, time.time(), status
                    )
                )
                if delay:
                    time.sleep(delay)
                payload = receiver.ok_body if status < 300 else b"failing on purpose"
                try:
                    self.send_response(status)
                    for k, v in receiver.extra_headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)  # port 0: a free one
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    # ---- control ---------------------------------------------------------------------
    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/hook"

    def fail(
        self, status: int = 500, *, for_s: float | None = None, count: int | None = None
    ) -> None:
        """Answer ``status`` for ``for_s`` seconds and/or the next ``count`` requests."""
        with self._lock:
            self._fail_status = status
            self._fail_until = time.monotonic() + for_s if for_s else 0.0
            self._fail_count = count or 0

    def hang(self, delay_s: float, *, for_s: float | None = None, count: int | None = None) -> None:
        """Hold requests ``delay_s`` then answer 504 (a client with a shorter timeout sees a
        timeout; the request is not accepted)."""
        with self._lock:
            self._hang_delay = delay_s
            self._hang_until = time.monotonic() + for_s if for_s else 0.0
            self._hang_count = count or 0

    def recover(self) -> None:
        with self._lock:
            self._fail_until = self._hang_until = 0.0
            self._fail_count = self._hang_count = 0

    def _decide(self) -> tuple[int, float]:
        with self._lock:
            now = time.monotonic()
            if self._hang_count > 0 or now < self._hang_until:
                self._hang_count = max(0, self._hang_count - 1)
                return 504, self._hang_delay
            if self._fail_count > 0 or now < self._fail_until:
                self._fail_count = max(0, self._fail_count - 1)
                return self._fail_status, 0.0
            return self.ok_status, 0.0

    def _record(self, req: Request) -> None:
        with self._cond:
            self.requests.append(req)
            self._cond.notify_all()

    # ---- inspection ------------------------------------------------------------------
    def accepted(self) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if 200 <= r.status < 300]

    def wait_for(self, n: int, timeout: float = 10.0, *, accepted: bool = True) -> bool:
        """Wait until ``n`` (accepted) requests arrived."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                have = [r for r in self.requests if not accepted or 200 <= r.status < 300]
                if len(have) >= n:
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)

    # ---- lifecycle -------------------------------------------------------------------
    def start(self) -> Receiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> Receiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
