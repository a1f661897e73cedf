"""Decode throughput of the ingest layer (not a test; run by hand).

    .venv/bin/python tests/bench_ingest.py [name-filter ...]

Prints lines/s per decoder, best of 5 runs, measured in process CPU time so that other
load on a shared machine distorts it less (it still does: compare figures from one run).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import msgpack  # noqa: E402

from service.ingest.envelope import decode_line  # noqa: E402
from service.sources.files import read_file  # noqa: E402
from service.sources.http.body import decode_http_body  # noqa: E402
from service.sources.kafka.value import decode_kafka_value  # noqa: E402
from tests.ingest_samples import (  # noqa: E402
    COLOURED,
    ENGINE_FAILED,
    KV_CACHE,
    NCCL_WARN,
    NO_KERNEL,
    ROUTES,
    STARTUP,
    fluent_bit_record,
)

N = 100_000
LINES = [
    ROUTES,
    STARTUP,
    NO_KERNEL,
    NCCL_WARN,
    ENGINE_FAILED,
    KV_CACHE,
    COLOURED,
    "(APIServer pid=1) INFO 07-27 10:11:14 [loggers.py:123] Engine 000: Avg prompt throughput: "
    "0.0 tokens/s, Avg generation throughput: 25.1 tokens/s, Running: 1 reqs, Waiting: 0 reqs",
]


def line(i: int) -> str:
    return LINES[i % len(LINES)]


def stamp(i: int) -> str:
    return f"2026-07-27T10:{(i // 6000) % 60:02d}:{(i // 100) % 60:02d}.{i:09d}Z"


def inputs() -> dict[str, Callable[[], int]]:
    raw = [line(i) + "\n" for i in range(N)]
    cri = [f"{stamp(i)} {'stderr' if i % 3 == 0 else 'stdout'} F {line(i)}\n" for i in range(N)]
    docker = [
        json.dumps({"log": line(i) + "\n", "stream": "stdout", "time": stamp(i)}) + "\n"
        for i in range(N)
    ]
    fluent = [
        json.dumps({"@timestamp": 1785147072.123 + i, **fluent_bit_record(log=line(i))}) + "\n"
        for i in range(N)
    ]
    values = [v.encode() for v in fluent]
    ndjson = "".join(fluent).encode()
    chunk = b"".join(
        msgpack.packb(
            [
                msgpack.ExtType(0, (1785147072 + i).to_bytes(4, "big") + b"\0\0\0\1"),
                {k: v for k, v in fluent_bit_record(log=line(i)).items() if k != "time"},
            ]
        )
        for i in range(N)
    )
    tmp = tempfile.mkdtemp()
    paths = {}
    for name, lines in (("raw", raw), ("cri", cri), ("docker", docker)):
        paths[name] = os.path.join(tmp, f"{name}.log")
        Path(paths[name]).write_text("".join(lines))
    return {
        "decode_line raw": lambda: sum(len(decode_line(x, "s")) for x in raw),
        "decode_line cri": lambda: sum(len(decode_line(x, "s")) for x in cri),
        "decode_line docker json": lambda: sum(len(decode_line(x, "s")) for x in docker),
        "decode_line fluent json (k8s)": lambda: sum(len(decode_line(x, "s")) for x in fluent),
        "decode_kafka_value fluent json": lambda: sum(
            len(decode_kafka_value(v, None, "t", 0, 1)) for v in values
        ),
        "decode_http_body ndjson": lambda: len(
            decode_http_body(ndjson, "application/x-ndjson", None)[0]
        ),
        "decode_http_body msgpack": lambda: len(
            decode_http_body(chunk, "application/msgpack", None)[0]
        ),
        "read_file raw": lambda: sum(1 for _ in read_file(paths["raw"])),
        "read_file cri (+joiner)": lambda: sum(1 for _ in read_file(paths["cri"])),
        "read_file docker (+joiner)": lambda: sum(1 for _ in read_file(paths["docker"])),
    }


def best_rate(fn: Callable[[], int], runs: int = 5) -> float:
    best = float("inf")
    count = 0
    for _ in range(runs):
        start = time.process_time()
        count = fn()
        best = min(best, time.process_time() - start)
    return count / best


def main(filters: list[str]) -> None:
    for name, fn in inputs().items():
        if filters and not any(f in name for f in filters):
            continue
        print(f"{name:34s} {best_rate(fn) / 1e3:8.0f}k lines/s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
