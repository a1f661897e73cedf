"""Benchmark the offline classifier (not a test): a realistic 1M-line stream, mostly serving
and access lines with rare failures, through envelope decoding + the full classifier.

Reports lines/s on one core and peak RSS. Usage:
    .venv/bin/python scripts/bench_classify.py [--lines 1000000] [--format raw|cri] [--model]
"""

from __future__ import annotations

import argparse
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.classify.loader import build_classifier  # noqa: E402
from service.classify.report import classify_records  # noqa: E402
from service.sources.files import read_file  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
_REAL = (
    (ROOT / "tests/fixtures/real/healthy-serving-prefix-caching-sigterm.log")
    .read_text(errors="replace")
    .splitlines()
)
# a real startup, up to and including "Application startup complete."
STARTUP = _REAL[: next(i for i, t in enumerate(_REAL) if "startup complete" in t) + 1]
FAILURES = [
    "(Worker_TP1 pid={pid}) ERROR 07-21 05:{m:02d}:{s:02d} [multiproc_executor.py:470] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.19 GiB of which 1.02 GiB is free.",
    "node-{n}:71:305 [3] misc/ibvwrap.cc:190 NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory",
    "(APIServer pid=1) ERROR 07-21 05:{m:02d}:{s:02d} [core_client.py:564] Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.",
]


def serving_line(rng: random.Random, i: int) -> str:
    m, s = (i // 60) % 60, i % 60
    r = rng.random()
    if r < 0.70:
        return (
            f"(APIServer pid=1) INFO:     10.0.{rng.randint(0, 255)}.{rng.randint(0, 255)}:"
            f'{rng.randint(1024, 65535)} - "POST /v1/chat/completions HTTP/1.1" 200 OK'
        )
    if r < 0.85:
        return (
            f"(APIServer pid=1) INFO 07-21 05:{m:02d}:{s:02d} [loggers.py:123] Engine 000: "
            f"Avg prompt throughput: {rng.uniform(0, 9000):.1f} tokens/s, Avg generation "
            f"throughput: {rng.uniform(0, 3000):.1f} tokens/s, Running: {rng.randint(0, 64)} "
            f"reqs, Waiting: {rng.randint(0, 8)} reqs, GPU KV cache usage: "
            f"{rng.uniform(0, 90):.1f}%, Prefix cache hit rate: {rng.uniform(0, 80):.1f}%"
        )
    if r < 0.95:
        return '(APIServer pid=1) INFO:     10.0.0.1:33456 - "GET /health HTTP/1.1" 200 OK'
    return (
        f"(APIServer pid=1) WARNING 07-21 05:{m:02d}:{s:02d} [protocol.py:88] The following "
        f"fields were present in the request but ignored: {{'stream_options'}}"
    )


def make_stream(path: Path, lines: int, fmt: str, streams: int = 50, seed: int = 7) -> None:
    rng = random.Random(seed)
    with path.open("w") as fh:
        written = 0
        for k in range(streams):
            for t in STARTUP:
                fh.write(_wrap(t, fmt, k) + "\n")
                written += 1
        i = 0
        while written < lines:
            k = rng.randrange(streams)
            if rng.random() < 1e-4:
                t = rng.choice(FAILURES).format(pid=100 + k, m=i % 60, s=i % 60, n=k)
            else:
                t = serving_line(rng, i)
            fh.write(_wrap(t, fmt, k) + "\n")
            written += 1
            i += 1


def _wrap(text: str, fmt: str, k: int) -> str:
    if fmt == "cri":
        return f"2026-12-02T14:{k % 60:02d}:12.123456789Z stdout F {text}"
    return text


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--format", choices=["raw", "cri"], default="raw")
    ap.add_argument("--model", action="store_true", help="also load the text model")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"bench.{args.format}.log"
        make_stream(path, args.lines, args.format)
        clf = build_classifier(use_model=args.model)
        t0 = time.perf_counter()
        reports = classify_records(read_file(str(path), stream="bench", fmt=args.format), clf)
        dt = time.perf_counter() - t0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    incidents = sum(len(r["incidents"]) for r in reports)
    print(
        f"lines={args.lines} format={args.format} model={args.model} "
        f"seconds={dt:.2f} lines_per_s={args.lines / dt:,.0f} peak_rss_mb={rss_mb:.0f} "
        f"incidents={incidents} model_calls={clf.findings.model_calls}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
