"""A TCP proxy that a test can cut: the service under test reaches its database through it,
so a database outage is real for the service (connections reset, new ones refused) and
nobody else sharing the server notices.

    with TcpProxy("127.0.0.1", 5432) as proxy:
        url = f"postgresql://postgres@127.0.0.1:{proxy.port}/test"
        proxy.cut(for_s=3.0)   # reset every connection; refuse new ones for three seconds
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time


class TcpProxy:
    def __init__(self, target_host: str, target_port: int, host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self._listen = socket.create_server((host, 0))
        self.port = self._listen.getsockname()[1]
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._down_until = 0.0
        self._closed = False
        self.cuts = 0
        self.refused = 0  # connections refused while down
        self._thread = threading.Thread(target=self._accept_loop, name="tcp-proxy", daemon=True)

    # ---- control ---------------------------------------------------------------------
    def cut(self, for_s: float) -> None:
        """Reset every open connection now and refuse new ones for ``for_s`` seconds."""
        with self._lock:
            self._down_until = time.monotonic() + for_s
            conns = list(self._conns)
            self._conns.clear()
            self.cuts += 1
        for s in conns:
            _reset(s)

    def down(self) -> bool:
        return time.monotonic() < self._down_until

    # ---- plumbing --------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listen.accept()
            except OSError:
                return
            if self.down():
                self.refused += 1
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _reset(client)
                continue
            with self._lock:
                self._conns.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._conns.discard(src)
                self._conns.discard(dst)
            for s in (src, dst):
                _reset(s)

    def start(self) -> TcpProxy:
        self._thread.start()
        return self

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listen.close()
        with self._lock:
            conns = list(self._conns)
            self._conns.clear()
        for s in conns:
            _reset(s)

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _reset(s: socket.socket) -> None:
    """Close with RST (SO_LINGER 0), as a dead peer or a broken network looks."""
    with contextlib.suppress(OSError):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in recv on it
    with contextlib.suppress(OSError):
        s.close()
