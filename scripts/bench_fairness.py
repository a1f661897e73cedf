#!/usr/bin/env python3
"""Fairness benchmark of the real service (not a test): does a flood on stream A delay stream
B's page?

One ``vllm-sentinel serve`` (SQLite store, HTTP ingest, a webhook receiver on this machine).
Stream B is a real failing vLLM start (``--log``, default tests/fixtures/real/bad-dtype.log)
posted to ``POST /ingest`` as Fluent Bit's http output sends it. Stream A is a flood of
crafted lines of 8 KiB, dense in the rule book's own words (the positive examples of
rules/signatures/*.yaml, back to back), posted by ``--clients`` clients at once, ``--lines``
in all, ``--batch`` lines a request.

* **alone**: B's log is posted on an idle service; its page latency is the time from the
  post to the webhook's arrival.
* **under flood**: A's clients start; once the service is busy with them (``--lead`` s), B's
  log (another pod, so a new incident) is posted; its page latency is measured the same way,
  and the time A's backlog took to be acknowledged is noted (B's page should come first).

Usage::

    .venv/bin/python scripts/bench_fairness.py [--lines 1000] [--batch 50] [--clients 4]
        [--runs 3] [--bin PATH/TO/vllm-sentinel]   # another build, e.g. before a change
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests import e2e_support  # noqa: E402
from tests.e2e_support import (  # noqa: E402
    Sentinel,
    free_port,
    iso_ns,
    kubernetes_map,
    service_config,
    wait_until,
    webhook,
)
from tests.receiver import Receiver  # noqa: E402

TOKEN = "bench-fairness-kQ8vX2mP9rL4tW7zY1nB3cD5"
LINE_CHARS = 8192


def dense_line(i: int) -> str:
    """8 KiB of the rule book's positive examples back to back (different per ``i``)."""
    words: list[str] = []
    for path in sorted((ROOT / "rules" / "signatures").glob("*.yaml")):
        for sig in yaml.safe_load(path.read_text()).get("signatures", []):
            words += [str(x) for x in (sig.get("examples") or {}).get("match", [])]
    start = i % max(1, len(words))
    out: list[str] = []
    size = 0
    k = start
    while size < LINE_CHARS:
        w = words[k % len(words)]
        out.append(w)
        size += len(w) + 1
        k += 1
    return " ".join(out)[:LINE_CHARS]


def records(lines: list[str], ns: str, pod: str) -> list[dict[str, Any]]:
    now = time.time()
    return [
        {
            "date": now,
            "time": iso_ns(now),
            "stream": "stdout",
            "_p": "F",
            "log": line,
            "kubernetes": kubernetes_map(ns, pod, "gpu-node-1"),
        }
        for line in lines
    ]


def post(svc: Sentinel, recs: list[dict[str, Any]]) -> None:
    r = svc.http.post(
        "/ingest",
        content=json.dumps(recs).encode(),
        headers={**svc.headers(), "Content-Type": "application/json"},
        timeout=600.0,
    )
    r.raise_for_status()


def page_latency(svc: Sentinel, rx: Receiver, log: list[str], pod: str) -> float:
    """Post ``log`` as pod ``pod``; seconds until its page reaches the receiver."""
    t0 = time.time()
    post(svc, records(log, "llm-b", pod))

    def paged() -> float | None:
        for req in rx.accepted():
            if req.path == "/hook" and pod in req.body.decode("utf-8", "replace"):
                return req.at - t0
        return None

    return float(wait_until(paged, 300, f"the page of {pod}", interval=0.02))


def run(args: argparse.Namespace, work: Path, n: int) -> dict[str, float]:
    log = Path(args.log).read_text().splitlines()
    flood = [dense_line(i) for i in range(args.lines)]
    with Receiver() as rx:
        port = free_port()
        cfg = service_config(
            store_url=f"sqlite:///{work / f'fair{n}.db'}",
            api_port=port,
            token=TOKEN,
            receivers=[webhook(rx.url, "oncall")],
        )
        svc = Sentinel(work, f"fair{n}", cfg)
        try:
            svc.start().wait_ready()
            alone = page_latency(svc, rx, log, f"b-alone-{n}")
            done: list[float] = []
            per = [flood[i :: args.clients] for i in range(args.clients)]

            def client(lines: list[str], c: int) -> None:
                for i in range(0, len(lines), args.batch):
                    post(svc, records(lines[i : i + args.batch], "llm-a", f"a-flood-{c}"))
                done.append(time.time())

            t_flood = time.time()
            threads = [
                threading.Thread(target=client, args=(lines, c), daemon=True)
                for c, lines in enumerate(per)
            ]
            for t in threads:
                t.start()
            time.sleep(args.lead)
            t_b = time.time()
            flooded = page_latency(svc, rx, log, f"b-flood-{n}")
            b_paged = t_b + flooded
            for t in threads:
                t.join()
            backlog = max(done) - t_flood
            slowed = svc.metric("sentinel_pipeline_slowed_records_total")
            return {
                "alone_s": alone,
                "flood_s": flooded,
                "backlog_s": backlog,
                "b_paged_at_s": b_paged - t_flood,
                "slowed_records": slowed,
            }
        finally:
            svc.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--lead", type=float, default=1.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--log", default=str(ROOT / "tests" / "fixtures" / "real" / "bad-dtype.log"))
    ap.add_argument("--bin", default=None, help="another vllm-sentinel executable")
    args = ap.parse_args()
    if args.bin:
        e2e_support.SENTINEL_BIN = Path(args.bin)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-fairness-") as tmp:
        for n in range(args.runs):
            row = run(args, Path(tmp), n)
            rows.append(row)
            print(json.dumps({k: round(v, 3) for k, v in row.items()}), flush=True)
    for key in ("alone_s", "flood_s", "backlog_s", "b_paged_at_s"):
        vals = [r[key] for r in rows]
        print(
            f"{key}: median {statistics.median(vals):.3f} (min {min(vals):.3f}, max {max(vals):.3f})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
