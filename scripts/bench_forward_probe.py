#!/usr/bin/env python3
"""Liveness under Forward bombs (not a test): how long ``GET /healthz`` takes while
``--parallel`` clients each send one Forward message of ``--entries`` empty entries (the
largest a message may hold is 100,000; the rest is decoded to be refused) to the real
service.

Prints the slowest probe and the median, probing every 20 ms from before the first message
until every connection was answered or closed, and the same with one message alone.

Usage::

    .venv/bin/python scripts/bench_forward_probe.py [--entries 1000000] [--parallel 4]
        [--bin PATH/TO/vllm-sentinel]   # another build, e.g. before a change
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import msgpack

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests import e2e_support  # noqa: E402
from tests.e2e_support import Sentinel, free_port, service_config  # noqa: E402


def bomb(entries: int) -> bytes:
    """A Forward-mode message of ``entries`` ``[time, {}]`` entries."""
    now = int(time.time())
    return msgpack.packb(["bomb", [[now, {}] for _ in range(entries)]], use_bin_type=True)


def send(port: int, message: bytes) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        sock.sendall(message)
        sock.shutdown(socket.SHUT_WR)
        try:
            while sock.recv(65536):
                pass
        except OSError:
            pass


def probe_while(api: int, port: int, message: bytes, parallel: int) -> list[float]:
    lat: list[float] = []
    stop = threading.Event()

    def probe() -> None:
        with httpx.Client(base_url=f"http://127.0.0.1:{api}", timeout=30) as c:
            while not stop.is_set():
                t = time.perf_counter()
                c.get("/healthz", headers={"Connection": "close"})
                lat.append(time.perf_counter() - t)
                time.sleep(0.02)

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    time.sleep(0.3)
    senders = [threading.Thread(target=send, args=(port, message)) for _ in range(parallel)]
    for s in senders:
        s.start()
    for s in senders:
        s.join()
    time.sleep(0.3)
    stop.set()
    prober.join()
    return lat


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--bin", default=None, help="another vllm-sentinel executable")
    args = ap.parse_args()
    if args.bin:
        e2e_support.SENTINEL_BIN = Path(args.bin)
    message = bomb(args.entries)
    with tempfile.TemporaryDirectory(prefix="bench-fwd-") as tmp:
        api, fwd = free_port(), free_port()
        cfg = service_config(
            store_url=f"sqlite:///{Path(tmp) / 's.db'}", api_port=api, forward_port=fwd
        )
        cfg["sources"]["forward"]["max_message_bytes"] = 64 << 20
        svc = Sentinel(Path(tmp), "fwd", cfg)
        try:
            svc.start().wait_ready()
            for n in (1, args.parallel):
                lat = probe_while(api, fwd, message, n)
                print(
                    f"{n} message(s) of {args.entries} entries ({len(message) >> 20} MiB): "
                    f"/healthz max {max(lat):.3f} s, median {statistics.median(lat):.3f} s, "
                    f"{len(lat)} probes"
                )
        finally:
            svc.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
