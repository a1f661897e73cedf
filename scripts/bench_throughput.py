"""Throughput of ``vllm-sentinel classify`` against the simplest loops (not a test).

Writes the README's benchmark streams (scripts/bench_classify.py: 1M lines, 70% access
lines; and a marker-heavy one where a third of the lines are stage markers / restarts), then
times whole processes in the same run: a bare Python loop that decodes each line and runs
one compiled ``re.search``, ``grep -F`` with ten literals, and ``vllm-sentinel classify
--json`` (model loaded). Prints lines/s, MB/s and the ratio to the bare loop for each.

    .venv/bin/python scripts/bench_throughput.py [--lines 1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_classify import STARTUP, make_stream, serving_line  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SENTINEL = ROOT / ".venv" / "bin" / "vllm-sentinel"
BARE = """
import re, sys
p = re.compile(r"CUDA out of memory|NCCL WARN")
n = 0
with open(sys.argv[1], "rb") as f:
    for raw in f:
        if p.search(raw.decode("utf-8", "replace")):
            n += 1
print(n)
"""
GREP_WORDS = [
    "CUDA out of memory",
    "NCCL WARN",
    "Traceback",
    "Error",
    "error",
    "died",
    "Killed",
    "failed",
    "version",
    "shutdown",
]


def marker_heavy(path: Path, lines: int, seed: int = 11) -> None:
    """A third of the lines are start-up markers and restarts (many short runs)."""
    rng = random.Random(seed)
    with path.open("w") as fh:
        i = 0
        while i < lines:
            if rng.random() < 1 / 3:
                for t in STARTUP[:: max(1, len(STARTUP) // 12)]:
                    fh.write(t + "\n")
                    i += 1
            else:
                fh.write(serving_line(rng, i) + "\n")
                i += 1


def timed(cmd: list[str], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        # output to a pipe, not /dev/null: GNU grep stops at the first match when it can tell
        # its output is discarded
        subprocess.run(cmd, check=False, capture_output=True)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", choices=["realistic", "marker-heavy"], help="one stream only")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        streams = {"realistic": Path(d) / "realistic.log", "marker-heavy": Path(d) / "markers.log"}
        make_stream(streams["realistic"], args.lines, "raw")
        marker_heavy(streams["marker-heavy"], args.lines)
        for name, path in streams.items():
            if args.only and name != args.only:
                continue
            n = sum(1 for _ in path.open("rb"))
            mb = path.stat().st_size / 1e6
            bare = timed([sys.executable, "-c", BARE, str(path)], args.repeat)
            grep = timed(
                ["grep", "-c", "-F", *sum((["-e", w] for w in GREP_WORDS), []), str(path)],
                args.repeat,
            )
            ours = timed([str(SENTINEL), "classify", "--json", str(path)], args.repeat)
            print(f"== {name}: {n:,} lines, {mb:.0f} MB")
            for label, t in (
                ("bare Python loop", bare),
                ("grep -F, 10 literals", grep),
                ("vllm-sentinel classify --json", ours),
            ):
                print(
                    f"   {label:32s} {t:6.2f} s  {n / t:>12,.0f} lines/s  {mb / t:7.1f} MB/s"
                    f"  {bare / t:5.2f}x bare loop"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
