"""Memory per stream (not a test): N live streams, each fed a real healthy vLLM startup
(up to "Application startup complete."), then the classifier's Python heap is measured
with tracemalloc and divided by N.

    .venv/bin/python scripts/bench_streams.py [--streams 100000] [--lines 40]

Prints bytes per stream for the classifier state (what stays in memory between lines); the
service keeps at most ``streams.max_in_memory`` of them and forgets idle ones after
``streams.idle_evict_s`` (their snapshots are in the store).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.classify.engine import Classifier  # noqa: E402
from service.classify.rulebook import RuleBook  # noqa: E402
from service.records import LogRecord  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
REAL = (
    (ROOT / "tests/fixtures/real/healthy-serving-prefix-caching-sigterm.log")
    .read_text(errors="replace")
    .splitlines()
)
STARTUP = REAL[: next(i for i, t in enumerate(REAL) if "startup complete" in t) + 1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--streams", type=int, default=100_000)
    ap.add_argument("--lines", type=int, default=40, help="startup lines fed to each stream")
    args = ap.parse_args()
    lines = STARTUP[-args.lines :]
    clf = Classifier(RuleBook())
    clf.feed(LogRecord("warmup", lines[0]))  # rules and lazy tables loaded before measuring
    clf.forget(["warmup"])
    gc.collect()
    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    t0 = time.perf_counter()
    for i in range(args.streams):
        meta = {
            "namespace": "llm",
            "pod": f"vllm-{i:06d}-abcde",
            "container": "vllm",
            "node": f"gpu-node-{i % 512}",
            "image": "vllm/vllm-openai:v0.11.0",
        }
        key = f"llm/vllm-{i:06d}-abcde/vllm"
        for t in lines:
            clf.feed(LogRecord(key, t, None, meta))
    elapsed = time.perf_counter() - t0
    gc.collect()
    used, _ = tracemalloc.get_traced_memory()
    per = (used - base) / args.streams
    print(
        f"streams={args.streams} lines_each={len(lines)} in_memory={len(clf.tracker.streams)} "
        f"heap={(used - base) / 1e6:.1f} MB per_stream={per:.0f} B "
        f"feed={args.streams * len(lines) / elapsed:,.0f} lines/s (traced)"
    )


if __name__ == "__main__":
    main()
