#!/usr/bin/env python3
"""End-to-end benchmark of the real service (not a test): Kafka → ``vllm-sentinel serve`` →
store → webhook, for each Kafka client backend.

The stream is realistic: ``--pods`` healthy vLLM pods that start (the real startup of a
captured CPU vLLM run) and then serve (access-log and engine-stats lines with varying
numbers), as Fluent Bit's kafka output ships them (JSON, ``@timestamp``, nested
``kubernetes`` map, key ``namespace/pod``, murmur2 partitioner, gzip; produced with
librdkafka like Fluent Bit), plus ``--failures`` failing startups (real captured and public
failure logs, each one critical incident) spread evenly through the stream.

Two measurements per client, each with a fresh service process, consumer group and store
(a SQLite file, or with ``--pg`` a new PostgreSQL schema):

* **throughput** — the topic is filled first (``--lines`` lines); lines/s from the first line
  the service reads to the last one committed (start-up and group join not counted);
* **alert latency** — a live stream at ``--rate`` lines/s with ``--failures`` failure bursts
  spread over it: for each, the time from the broker's ack of its last line to the webhook
  arriving at a local receiver (p50/p99). The shipped notify settings apply
  (``group_wait_s`` 1.0 s: changes coalesce that long before a page), unless
  ``--group-wait`` says otherwise.

Usage::

    .venv/bin/python scripts/bench_e2e.py [--lines 500000] [--pods 40] [--failures 50]
        [--partitions 4] [--rate 2000] [--clients kafka-python,confluent-kafka]
        [--pg]                    # PostgreSQL (a fresh schema per run) instead of SQLite
        [--bootstrap HOST:PORT]   # default: start Tansu (scripts/tansu.py), stop it after
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e_support import (  # noqa: E402
    CORPUS,
    REAL,
    Sentinel,
    fluent_bit_records,
    free_port,
    iso_ns,
    kafka_source,
    kubernetes_map,
    service_config,
    wait_until,
    webhook,
)
from tests.receiver import Receiver  # noqa: E402

TANSU = ROOT / "scripts" / "tansu.py"
NS = "bench"
FAILING = [  # one critical incident each, per-workload categories (never held for a fleet)
    REAL / "bad-dtype.cri.log",
    REAL / "port-in-use.cri.log",
    REAL / "tokenizer-missing.cri.log",
    REAL / "worker-killed-while-serving.cri.log",
    REAL / "kv-cache-too-small.cri.log",
    REAL / "model-unavailable-offline.cri.log",
    REAL / "trust-remote-code-required.cri.log",
    CORPUS / "gh-vllm-28143-oom-weights-linear-create-weights.log",
    CORPUS / "gh-arcticinference-37-worker-killed-after-weights.log",
    CORPUS / "gh-vllm-27508-max-seq-len-gib-estimate-py313.log",
    CORPUS / "gh-vllm-3963-v040-gated-repo-llama2.log",
    CORPUS / "gh-gpustack-814-v06-tp3-heads-not-divisible.log",
]
HEALTHY = REAL / "healthy-serving-prefix-caching-sigterm.cri.log"


# ---- the stream ----------------------------------------------------------------------------
class ServingPod:
    """One healthy pod: the real startup, then serving lines with varying numbers."""

    def __init__(self, pod: str, rng: random.Random) -> None:
        self.pod = pod
        self.rng = rng
        recs = fluent_bit_records(HEALTHY, NS, pod)
        ready = next(i for i, r in enumerate(recs) if r["log"].endswith("startup complete."))
        self.head = recs[: ready + 1]
        self.kube = kubernetes_map(NS, pod)
        self.n = 0

    def line(self) -> str:
        rng = self.rng
        r = rng.random()
        if r < 0.7:
            return (
                f"INFO:     10.0.{rng.randint(0, 255)}.{rng.randint(0, 255)}:"
                f'{rng.randint(1024, 65535)} - "POST /v1/chat/completions HTTP/1.1" 200 OK'
            )
        if r < 0.9:
            return (
                f"(APIServer pid=1) INFO 12-02 14:36:{rng.randint(10, 59)} [loggers.py:335] "
                f"Engine 000: Avg prompt throughput: {rng.uniform(0, 9000):.1f} tokens/s, "
                f"Avg generation throughput: {rng.uniform(0, 3000):.1f} tokens/s, Running: "
                f"{rng.randint(0, 64)} reqs, Waiting: {rng.randint(0, 8)} reqs, GPU KV cache "
                f"usage: {rng.uniform(0, 90):.1f}%, Prefix cache hit rate: "
                f"{rng.uniform(0, 80):.1f}%"
            )
        return 'INFO:     10.0.0.1:33456 - "GET /health HTTP/1.1" 200 OK'

    def next(self, now: float) -> tuple[bytes, bytes]:
        if self.n < len(self.head):
            rec = dict(self.head[self.n])
        else:
            rec = {
                "stream": "stdout",
                "_p": "F",
                "log": self.line(),
                "kubernetes": self.kube,
                "sentinel_key": f"{NS}/{self.pod}",
            }
        rec["@timestamp"] = iso_ns(now)
        self.n += 1
        return f"{NS}/{self.pod}".encode(), json.dumps(rec).encode()


def failure_burst(i: int, tag: str) -> tuple[str, list[tuple[bytes, bytes]]]:
    pod = f"crash-{tag}-{i}"
    recs = fluent_bit_records(FAILING[i % len(FAILING)], NS, pod)
    return pod, [(r["sentinel_key"].encode(), json.dumps(r).encode()) for r in recs]


def stream(
    lines: int, pods: int, failures: int, tag: str, seed: int = 7
) -> Iterator[tuple[bytes, bytes, str | None]]:
    """(key, value, pod of a failure burst that ends here or None), ``lines`` in all."""
    rng = random.Random(seed)
    serving = [ServingPod(f"serve-{tag}-{k}", rng) for k in range(pods)]
    bursts = [failure_burst(i, tag) for i in range(failures)]
    burst_lines = sum(len(b) for _, b in bursts)
    filler = max(0, lines - burst_lines)
    points = [filler * (i + 1) // (failures + 1) for i in range(failures)]
    b = 0
    for n in range(filler):
        while b < failures and points[b] == n:
            pod, msgs = bursts[b]
            for j, (k, v) in enumerate(msgs):
                yield k, v, pod if j == len(msgs) - 1 else None
            b += 1
        k, v = serving[n % pods].next(time.time())
        yield k, v, None
    for pod, msgs in bursts[b:]:
        for j, (k, v) in enumerate(msgs):
            yield k, v, pod if j == len(msgs) - 1 else None


# ---- Kafka ---------------------------------------------------------------------------------
def producer(bootstrap: str) -> Any:
    from confluent_kafka import Producer

    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "partitioner": "murmur2_random",
            "linger.ms": 20,
            "compression.codec": "gzip",
            "acks": "all",
            "queue.buffering.max.messages": 200000,
        }
    )


def send(p: Any, topic: str, key: bytes, value: bytes, on_ack: Any = None) -> None:
    while True:
        try:
            p.produce(topic, value=value, key=key, on_delivery=on_ack)
            return
        except BufferError:
            p.poll(0.05)


def create_topic(bootstrap: str, partitions: int) -> str:
    from kafka.admin import KafkaAdminClient, NewTopic

    name = f"bench-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()
    return name


def committed_total(bootstrap: str, group: str, topic: str, partitions: int) -> int:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        return sum(c.committed(TopicPartition(topic, p)) or 0 for p in range(partitions))
    finally:
        c.close(autocommit=False)


# ---- runs ----------------------------------------------------------------------------------
def store_url(workdir: Path, name: str, args: argparse.Namespace) -> str:
    """A fresh store per run: a SQLite file, or a new schema in ``--pg`` (dropped at exit)."""
    if not args.pg:
        return f"sqlite:///{workdir / (name + '.db')}"
    import atexit

    from tests.test_store import fresh_pg_url

    gen = fresh_pg_url()
    url = next(gen)
    atexit.register(lambda: next(gen, None))
    return url


def start_service(
    workdir: Path,
    name: str,
    bootstrap: str,
    topic: str,
    client: str,
    receiver: Receiver,
    args: argparse.Namespace,
) -> Sentinel:
    store = store_url(workdir, name, args)
    notify = {"group_wait_s": args.group_wait} if args.group_wait is not None else {}
    cfg = service_config(
        store_url=store,
        api_port=free_port(),
        kafka=kafka_source(
            bootstrap, topic, f"g-{name}-{uuid.uuid4().hex[:6]}", client, max_poll_records=2000
        ),
        receivers=[webhook(receiver.url, rate_limit_per_minute=6000, timeout_s=5.0)],
    )
    # the shipped notify defaults (group_wait_s 1.0, backoff 1 s) unless --group-wait
    cfg["notify"] = {"external_url": cfg["notify"]["external_url"], **notify}
    svc = Sentinel(workdir, name, cfg)
    svc.start().wait_ready(60)
    return svc


def throughput(
    workdir: Path, bootstrap: str, topic: str, total: int, client: str, args: argparse.Namespace
) -> dict[str, float]:
    with Receiver() as rx:
        svc = start_service(workdir, f"tp-{client}", bootstrap, topic, client, rx, args)
        try:
            group = svc.config["sources"]["kafka"]["group"]
            first = wait_until(
                lambda: svc.metric("sentinel_lines_total", source="kafka") > 0 and time.monotonic(),
                120,
                "the first line",
                interval=0.02,
            )
            cpu0 = _cpu(svc.pid)
            wait_until(
                lambda: svc.metric("sentinel_lines_total", source="kafka") >= total,
                3600,
                "every line read",
                interval=0.2,
            )
            wait_until(
                lambda: committed_total(bootstrap, group, topic, args.partitions) >= total,
                600,
                "every line committed",
                interval=0.1,
            )
            elapsed = time.monotonic() - first
            cpu = _cpu(svc.pid) - cpu0
            incidents = len(svc.incidents())
        finally:
            svc.close()
    return {
        "lines": total,
        "seconds": elapsed,
        "lines_per_s": total / elapsed,
        "lines_per_cpu_s": total / cpu if cpu else 0.0,
        "incidents": incidents,
    }


def latency(
    workdir: Path, bootstrap: str, client: str, args: argparse.Namespace
) -> dict[str, float]:
    topic = create_topic(bootstrap, args.partitions)
    lines = int(args.rate * args.live_seconds)
    with Receiver() as rx:
        svc = start_service(workdir, f"lat-{client}", bootstrap, topic, client, rx, args)
        try:
            wait_until(lambda: svc.assigned(), 60, "partitions")
            acked: dict[str, float] = {}
            p = producer(bootstrap)
            t0 = time.monotonic()
            for n, (k, v, pod) in enumerate(
                stream(lines, args.pods, args.failures, f"lat{client[:2]}")
            ):
                if pod is not None:

                    def on_ack(err: Any, _msg: Any, pod: str = pod) -> None:
                        if err is None:
                            acked[pod] = time.time()

                    send(p, topic, k, v, on_ack)
                else:
                    send(p, topic, k, v)
                if n % 100 == 0:
                    p.poll(0)
                    ahead = t0 + n / args.rate - time.monotonic()
                    if ahead > 0:
                        time.sleep(ahead)
            p.flush(30)
            wait_until(
                lambda: (
                    len(
                        {r.json()["incident"]["meta"].get("pod") for r in rx.accepted()}
                        & set(acked)
                    )
                    >= args.failures
                ),
                120,
                "every failure paged",
                interval=0.1,
            )
        finally:
            svc.close()
    got: dict[str, float] = {}
    for r in rx.accepted():
        pod = r.json()["incident"]["meta"].get("pod")
        if pod in acked:
            got.setdefault(pod, r.at)
    lat = sorted(got[pod] - acked[pod] for pod in got)
    return {
        "n": len(lat),
        "p50": statistics.median(lat),
        "p99": _pct(lat, 0.99),
        "max": lat[-1],
        "min": lat[0],
    }


def _pct(values: list[float], q: float) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q * 100) - 1]


def _cpu(pid: int) -> float:
    """User+system CPU seconds of a process (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        import os

        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def fill(bootstrap: str, topic: str, args: argparse.Namespace) -> tuple[int, float]:
    p = producer(bootstrap)
    started = time.monotonic()
    n = 0
    for n, (k, v, _) in enumerate(stream(args.lines, args.pods, args.failures, "tp"), 1):
        send(p, topic, k, v)
        if n % 1000 == 0:
            p.poll(0)
    left = p.flush(120)
    if left:
        raise SystemExit(f"{left} messages not delivered")
    return n, time.monotonic() - started


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=500_000)
    ap.add_argument("--pods", type=int, default=40)
    ap.add_argument("--failures", type=int, default=50)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rate", type=float, default=2000.0, help="live lines/s (latency run)")
    ap.add_argument("--live-seconds", type=float, default=25.0)
    ap.add_argument("--clients", default="kafka-python,confluent-kafka")
    ap.add_argument(
        "--group-wait",
        type=float,
        default=None,
        help="notify.group_wait_s (default: the shipped 1.0 s)",
    )
    ap.add_argument(
        "--pg",
        action="store_true",
        help="PostgreSQL ($SENTINEL_TEST_PG_URL, a fresh schema per run) instead "
        "of a fresh SQLite file per run",
    )
    ap.add_argument("--bootstrap", default=None)
    ap.add_argument("--skip", default="", help="throughput and/or latency")
    args = ap.parse_args()
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]

    port = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        out = subprocess.run(
            [sys.executable, str(TANSU), "start", "--port", "0"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        bootstrap = out.stdout.strip().splitlines()[-1]
        port = bootstrap.rpartition(":")[2]
    results: dict[str, dict[str, Any]] = {c: {} for c in clients}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-e2e-") as tmp:
            workdir = Path(tmp)
            if "throughput" not in args.skip:
                topic = create_topic(bootstrap, args.partitions)
                total, secs = fill(bootstrap, topic, args)
                print(
                    f"filled {topic}: {total} lines in {secs:.1f}s "
                    f"({total / secs:,.0f} lines/s produced)",
                    file=sys.stderr,
                )
                for c in clients:
                    results[c]["throughput"] = throughput(workdir, bootstrap, topic, total, c, args)
                    print(c, results[c]["throughput"], file=sys.stderr)
            if "latency" not in args.skip:
                for c in clients:
                    results[c]["latency"] = latency(workdir, bootstrap, c, args)
                    print(c, results[c]["latency"], file=sys.stderr)
    finally:
        if port is not None:
            subprocess.run(
                [sys.executable, str(TANSU), "stop", "--port", port],
                capture_output=True,
                timeout=30,
            )
    gw = "1.0 (default)" if args.group_wait is None else f"{args.group_wait}"
    print(
        f"\nKafka → vllm-sentinel serve → store → webhook; {args.partitions} partitions, "
        f"one instance, store {'PostgreSQL' if args.pg else 'SQLite'}, group_wait_s {gw}"
    )
    print(
        f"{'client':<16} {'lines':>8} {'lines/s':>9} {'lines/cpu-s':>11} {'incidents':>9} "
        f"{'alerts':>6} {'p50 s':>6} {'p99 s':>6} {'max s':>6}"
    )
    for c in clients:
        tp = results[c].get("throughput", {})
        lat = results[c].get("latency", {})
        print(
            f"{c:<16} {tp.get('lines', 0):>8} {tp.get('lines_per_s', 0):>9,.0f} "
            f"{tp.get('lines_per_cpu_s', 0):>11,.0f} {tp.get('incidents', 0):>9} "
            f"{lat.get('n', 0):>6} {lat.get('p50', 0):>6.2f} {lat.get('p99', 0):>6.2f} "
            f"{lat.get('max', 0):>6.2f}"
        )
    return 0


if __name__ == "__main__":
    threading.excepthook = lambda a: print(a, file=sys.stderr)
    sys.exit(main())
