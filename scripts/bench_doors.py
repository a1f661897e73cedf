"""Each door's worst case per byte (not a test): crafted bodies that expand the most, each
decoded in a fresh process the way the door decodes it, with the time taken and the growth
of the peak resident set (VmHWM) measured; SECURITY.md quotes the figures.

    .venv/bin/python scripts/bench_doors.py [--case NAME ...]

One row per case: bytes as sent, the answer (records kept or the refusal), seconds, peak RSS
growth in MiB, and both per KiB sent. Decoding only: classification cost is measured by
scripts/bench_classify.py.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import msgpack  # noqa: E402

from service.ingest.msgpack_events import new_unpacker  # noqa: E402
from service.sources.forward.messages import ForwardDecoder  # noqa: E402
from service.sources.http.body import BodyRefused, decode_body  # noqa: E402
from service.sources.http.otlp import decode_export  # noqa: E402

MiB = 1 << 20


def ld(tag: int, payload: bytes) -> bytes:
    n, size = len(payload), bytearray()
    while True:
        size.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            break
    return bytes([tag]) + bytes(size) + payload


def gz(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9)


def ingest(ct: str, data: bytes) -> Callable[[], str]:
    body = gz(data)
    return lambda: _answer(lambda: decode_body(body, ct, "gzip"), len(body))


def otlp(ct: str, data: bytes) -> Callable[[], str]:
    body = gz(data)
    return lambda: _answer(lambda: decode_export(body, ct, "gzip"), len(body))


def forward(message: bytes) -> Callable[[], str]:
    def run() -> str:
        decoder = ForwardDecoder()
        unpacker = new_unpacker(decoder.max_message_bytes)
        decoder.feed(unpacker, message)
        records, _, ok = decoder.drain(unpacker)
        return f"{len(message)}\t{len(records)} records{'' if ok else ' (stream dropped)'}"

    return run


def _answer(call: Callable[[], tuple[list, int]], sent: int) -> str:
    try:
        records, rejected = call()
    except BodyRefused as exc:
        return f"{sent}\t{exc.status} {exc.reason}"
    return f"{sent}\t{len(records)} records, {rejected} rejected"


def one_record() -> bytes:
    return json.dumps({"log": "INFO 12-01 10:00:00 engine.py:1] ok\n", "stream": "stdout"}).encode()


PB = "application/x-protobuf"
CASES: dict[str, Callable[[], Callable[[], str]]] = {
    "ingest-json-empty-objects-19.9M": lambda: ingest("application/x-ndjson", b"{}" * 19_900_000),
    "ingest-ndjson-numbers-150k": lambda: ingest("application/x-ndjson", b"7\n" * 150_000),
    "ingest-json-nested-1M-arrays": lambda: ingest(
        "application/json", b'{"log":"x","a":[' + b"[]," * 999_990 + b"[]]}"
    ),
    "ingest-ndjson-records-100k": lambda: ingest(
        "application/x-ndjson", (one_record() + b"\n") * 100_000
    ),
    "ingest-msgpack-maps-without-log-20M": lambda: ingest(
        "application/msgpack", msgpack.packb({}) * 20_000_000
    ),
    "ingest-msgpack-nested-arrays-60M": lambda: ingest(
        "application/msgpack",
        b"\xdc\x00\x3c" + (b"\xdd\x00\x10\x00\x00" + b"\x80" * (1 << 20)) * 60,
    ),
    "ingest-text-lines-100k": lambda: ingest("text/plain", b"x\n" * 100_000),
    "otlp-protobuf-empty-records-15.7M": lambda: otlp(
        PB, ld(0x0A, ld(0x12, b"\x12\x00" * 15_700_000))
    ),
    "otlp-protobuf-empty-records-100k": lambda: otlp(PB, ld(0x0A, ld(0x12, b"\x12\x00" * 100_000))),
    "otlp-protobuf-empty-attributes-900k": lambda: otlp(
        PB, ld(0x0A, ld(0x12, ld(0x12, b"\x32\x00" * 900_000)))
    ),
    "otlp-protobuf-fields-30M": lambda: otlp(
        PB, ld(0x0A, ld(0x12, ld(0x12, b"\x10\x01" * 30_000_000)))
    ),
    "otlp-json-empty-records-900k": lambda: otlp(
        "application/json",
        b'{"resourceLogs":[{"scopeLogs":[{"logRecords":[' + b"{}," * 900_000 + b"{}]}]}]}",
    ),
    "forward-entries-1M-empty-maps": lambda: forward(msgpack.packb(["t", [[0, {}]] * 1_000_000])),
    "forward-packed-gzip-20M-empty-maps": lambda: forward(
        msgpack.packb(["t", gz(msgpack.packb([0, {}]) * 20_000_000), {"compressed": "gzip"}])
    ),
}


def hwm() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def run_case(name: str) -> None:
    """In this (fresh) process: build the body, then time and measure its decoding."""
    call = CASES[name]()
    base = hwm()
    t = time.perf_counter()
    answer = call()
    seconds = time.perf_counter() - t
    print(f"{name}\t{answer}\t{seconds:.3f}\t{(hwm() - base) / MiB:.1f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", action="append", choices=sorted(CASES), help="only these")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one case here
    args = ap.parse_args()
    if args.one:
        run_case(args.one)
        return 0
    print("case\tbytes sent\tanswer\tseconds\tpeak RSS growth MiB\tms/KiB\tMiB/KiB")
    for name in args.case or CASES:
        out = subprocess.run(
            [sys.executable, __file__, "--one", name], capture_output=True, text=True
        )
        if out.returncode:
            print(f"{name}\tfailed: {out.stderr.strip()[-300:]}")
            continue
        row = out.stdout.strip().splitlines()[-1].split("\t")
        kib = int(row[1]) / 1024
        seconds, mib = float(row[3]), float(row[4])
        print("\t".join([*row, f"{seconds * 1000 / kib:.2f}", f"{mib / kib:.3f}"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
