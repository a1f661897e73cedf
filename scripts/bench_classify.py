"""Benchmark the offline classifier (not a test), as ratios measured in the same run.

* ``vllm-sentinel classify --json`` (a whole process) against a bare Python loop (one
  compiled ``re.search`` per line, a whole process) and ``grep -F``, on a realistic stream
  (mostly serving and access lines, rare failures; 2M lines) and a marker-heavy one (every
  line a start-up marker, warning, error or traceback line of the corpus; 200k lines);
  processes alternated, ``--pairs`` times, medians. Ratio = the baseline's time / classify's
  time (1.0x: as fast as the baseline). Targets (issue #29): >= 0.6x the loop on the
  realistic stream, >= 0.4x on the marker-heavy one.
* cost per line: classify's median time on a 200k-line realistic stream and on the
  ``--lines`` one, less the time of a process that classifies a few lines (start-up: imports,
  rules, model), per line; the larger stream's over the smaller's (target: flat, ~1.0x).
* crafted lines: the classifier's cost of a line built to wake the rules (repeated rule
  literals, brackets, digits, non-ASCII...) over a benign line of the same length
  (target: <= 3x).
* ``--inproc``: the former in-process figure (lines/s and peak RSS through
  ``classify_records``).

Usage:
    .venv/bin/python scripts/bench_classify.py [--lines 2000000] [--marker-lines 200000]
        [--pairs 3] [--format raw|cri] [--model] [--inproc]
"""

from __future__ import annotations

import argparse
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.classify.loader import build_classifier  # noqa: E402
from service.classify.rules import RULES_DIR, load_signatures  # noqa: E402
from service.classify.signatures import derive_literals  # noqa: E402
from service.offline.report import classify_records  # noqa: E402
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


MARKER_WORDS = ("error", "warn", "traceback", 'file "', "exception", "nccl", "cuda", "loading")
BARE_LOOP = """
import re, sys
rx = re.compile(r"ERROR|Traceback|CUDA out of memory")
n = 0
with open(sys.argv[1], encoding="utf-8", errors="replace") as fh:
    for line in fh:
        if rx.search(line):
            n += 1
print(n)
"""


def make_marker_stream(path: Path, lines: int, seed: int = 11) -> None:
    """Lines of the corpus that some rule, marker or failure word looks at, shuffled."""
    pool: list[str] = []
    for case in sorted((ROOT / "tests/corpus/cases").glob("*.log")):
        for t in case.read_text(errors="replace").splitlines():
            if any(w in t.lower() for w in MARKER_WORDS):
                pool.append(t)
    rng = random.Random(seed)
    with path.open("w") as fh:
        for _ in range(lines):
            fh.write(rng.choice(pool) + "\n")


def _run(argv: list[str]) -> float:
    t0 = time.perf_counter()
    # (a pipe, not /dev/null: grep stops at the first match when its output is discarded)
    done = subprocess.run(argv, check=False, capture_output=True)
    if done.returncode not in (0, 1):  # classify: 1 = an open critical incident
        raise SystemExit(f"{argv[:2]} failed with {done.returncode}")
    return time.perf_counter() - t0


def ratios(path: Path, pairs: int) -> dict[str, float]:
    """Median seconds of classify, the bare loop and grep -F on ``path`` (alternated)."""
    cli = str(Path(sys.executable).with_name("vllm-sentinel"))
    runs: dict[str, list[float]] = {"classify": [], "loop": [], "grep": []}
    for _ in range(pairs):
        runs["classify"].append(_run([cli, "classify", "--json", str(path)]))
        runs["loop"].append(_run([sys.executable, "-c", BARE_LOOP, str(path)]))
        runs["grep"].append(_run(["grep", "-F", "-c", "-e", "ERROR", str(path)]))
    return {k: statistics.median(v) for k, v in runs.items()}


def _classify_time(path: Path, pairs: int) -> float:
    cli = str(Path(sys.executable).with_name("vllm-sentinel"))
    return statistics.median(_run([cli, "classify", "--json", str(path)]) for _ in range(pairs))


def per_line(d: Path, lines: int, t_big: float, pairs: int) -> None:
    """Classify's cost per line at 200k lines and at ``lines``, net of its start-up."""
    tiny, small = d / "tiny.log", d / "small.log"
    tiny.write_text("\n".join(STARTUP[:20]) + "\n")
    make_stream(small, 200_000, "raw")
    start = _classify_time(tiny, pairs)
    t_small = _classify_time(small, pairs)
    us_small = max(t_small - start, 0.0) / 200_000 * 1e6
    us_big = max(t_big - start, 0.0) / lines * 1e6
    print(
        f"cost per line (net of a {start:.2f}s start-up): 200k lines {us_small:.2f} us, "
        f"{lines // 1000}k lines {us_big:.2f} us | {us_big / max(us_small, 1e-9):.2f}x "
        f"(target: flat, ~1.0x)"
    )


def report(name: str, lines: int, t: dict[str, float], target: float) -> None:
    loop, grep = t["loop"] / t["classify"], t["grep"] / t["classify"]
    print(
        f"{name}: lines={lines} classify={t['classify']:.2f}s loop={t['loop']:.2f}s "
        f"grep={t['grep']:.2f}s | classify vs loop {loop:.2f}x (target >= {target}x) "
        f"vs grep -F {grep:.3f}x | {lines / t['classify']:,.0f} lines/s"
    )


def crafted_costs(length: int = 4000, reps: int = 200) -> list[tuple[str, float]]:
    """Per crafted line: its cost in the classifier over a benign line's of that length."""
    lits = sorted(
        {
            lit
            for s in load_signatures(RULES_DIR)
            for lit in s.literals or derive_literals(s.pattern) or []
        }
    )
    header = "(VllmWorker rank=1 pid=42) ERROR 01-01 00:00:00 [core.py:1] "
    seeds = {
        "rule literals": " ".join(lits) + " ",
        "NCCL WARN": "NCCL WARN Call to ",
        "CUDA OOM": "CUDA out of memory ",
        "brackets": "([{",
        "digits": "0.0.0:",
        "paths": "'a/../",
        "Error words": "Error: failed ",
        "non-ASCII": "█▏ ",
    }
    benign = header + ("lorem ipsum dolor sit amet " * (length // 27 + 1))
    clf = build_classifier()

    def cost(body: str) -> float:
        text = (header + body * (length // len(body) + 1))[:length]
        best = float("inf")
        for k in range(3):
            st = clf.state(f"crafted-{k}-{body[:8]}")
            t0 = time.perf_counter()
            for _ in range(reps):
                clf.feed_text(st, text)
            best = min(best, time.perf_counter() - t0)
        return best

    base = cost(benign[len(header) :])
    return [(name, cost(seed) / base) for name, seed in seeds.items()]


def inproc(args: argparse.Namespace, path: Path) -> None:
    clf = build_classifier(use_model=args.model)
    t0 = time.perf_counter()
    reports = classify_records(read_file(str(path), stream="bench", fmt=args.format), clf)
    dt = time.perf_counter() - t0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    incidents = sum(len(r["incidents"]) for r in reports)
    print(
        f"in-process: lines={args.lines} format={args.format} model={args.model} "
        f"seconds={dt:.2f} lines_per_s={args.lines / dt:,.0f} peak_rss_mb={rss_mb:.0f} "
        f"incidents={incidents} model_calls={clf.findings.model_calls}"
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=2_000_000)
    ap.add_argument("--marker-lines", type=int, default=200_000)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--format", choices=["raw", "cri"], default="raw")
    ap.add_argument("--model", action="store_true", help="also load the text model (--inproc)")
    ap.add_argument("--inproc", action="store_true", help="only the in-process lines/s")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"bench.{args.format}.log"
        make_stream(path, args.lines, args.format)
        if args.inproc:
            inproc(args, path)
            return 0
        realistic = ratios(path, args.pairs)
        report("realistic", args.lines, realistic, 0.6)
        marker = Path(d) / "marker.log"
        make_marker_stream(marker, args.marker_lines)
        report("marker-heavy", args.marker_lines, ratios(marker, args.pairs), 0.4)
        if args.format == "raw":  # (the 200k stream is raw)
            per_line(Path(d), args.lines, realistic["classify"], args.pairs)
    costs = crafted_costs()
    worst = max(c for _, c in costs)
    print(
        "crafted line / benign line of the same length (target <= 3x): "
        + ", ".join(f"{n} {c:.2f}x" for n, c in costs)
        + f" | worst {worst:.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
