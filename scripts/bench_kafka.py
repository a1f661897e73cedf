#!/usr/bin/env python3
"""Benchmark the Kafka sources (not a test): N realistic vLLM log lines as Fluent Bit JSON
records (``@timestamp`` + CRI fields + a ``kubernetes`` map, keyed by container id) produced
to a Tansu broker, then consumed through each backend:

* ``decode``   — consume + decode (``decode_kafka_value``) + join; the handler only counts;
* ``classify`` — the same, with a handler that feeds every record to the real classifier
  (``build_classifier(use_model=False)``).

Each run is a fresh consumer group in a fresh process (so peak RSS is per run); lines/s are
measured from the partition assignment to the last record handled (the group join is not
counted); lines per CPU-second of the consumer process are printed too (steadier than wall
time on a shared machine). kafka-python verifies record CRC32C in pure Python unless the
``crc32c`` package is importable; the table says which one a run used. Usage::

    .venv/bin/python scripts/bench_kafka.py [--lines 1000000] [--partitions 4]
        [--clients kafka-python,confluent-kafka] [--modes decode,classify]
        [--bootstrap HOST:PORT]   # default: start Tansu with scripts/tansu.py, stop it after
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TANSU = ROOT / "scripts" / "tansu.py"
STARTUP = (
    (ROOT / "tests/fixtures/real/healthy-serving-prefix-caching-sigterm.log")
    .read_text(errors="replace")
    .splitlines()[:120]
)
FAILURES = [
    "(Worker_TP1 pid={pid}) ERROR {d} [multiproc_executor.py:470] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.19 GiB of which 1.02 GiB is free.",
    "vllm-{n}:71:305 [3] misc/ibvwrap.cc:190 NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory",
    "(APIServer pid=1) ERROR {d} [core_client.py:564] Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.",
]


def serving_line(rng: random.Random, d: str) -> str:
    r = rng.random()
    if r < 0.70:
        return (
            f"(APIServer pid=1) INFO:     10.0.{rng.randint(0, 255)}.{rng.randint(0, 255)}:"
            f'{rng.randint(1024, 65535)} - "POST /v1/chat/completions HTTP/1.1" 200 OK'
        )
    if r < 0.85:
        return (
            f"(APIServer pid=1) INFO {d} [loggers.py:123] Engine 000: Avg prompt throughput: "
            f"{rng.uniform(0, 9000):.1f} tokens/s, Avg generation throughput: "
            f"{rng.uniform(0, 3000):.1f} tokens/s, Running: {rng.randint(0, 64)} reqs, Waiting: "
            f"{rng.randint(0, 8)} reqs, GPU KV cache usage: {rng.uniform(0, 90):.1f}%, Prefix "
            f"cache hit rate: {rng.uniform(0, 80):.1f}%"
        )
    if r < 0.95:
        return '(APIServer pid=1) INFO:     10.0.0.1:33456 - "GET /health HTTP/1.1" 200 OK'
    return (
        f"(APIServer pid=1) WARNING {d} [protocol.py:88] The following fields were present in "
        "the request but ignored: {'stream_options'}"
    )


def pods(count: int, rng: random.Random) -> list[dict[str, object]]:
    out = []
    for k in range(count):
        cid = "".join(rng.choice("0123456789abcdef") for _ in range(64))
        pod = f"vllm-{k:02d}-7d9f8b6c4-{rng.randint(10000, 99999)}"
        out.append(
            {
                "pod_name": pod,
                "namespace_name": "inference",
                "pod_id": str(uuid.UUID(int=rng.getrandbits(128))),
                "labels": {"app.kubernetes.io/name": "vllm", "pod-template-hash": "7d9f8b6c4"},
                "annotations": {"kubectl.kubernetes.io/default-container": "vllm"},
                "host": f"gpu-node-{k % 16:02d}",
                "pod_ip": f"10.1.{k // 250}.{k % 250}",
                "container_name": "vllm",
                "docker_id": cid,
                "container_hash": "docker.io/vllm/vllm-openai@sha256:4b1d0c4e0b3a6f5e9c8d7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e",
                "container_image": "vllm/vllm-openai:v0.15.1",
            }
        )
    return out


def records(lines: int, streams: int = 50, seed: int = 7):
    """(key, value) of ``lines`` Fluent Bit kafka-output JSON records."""
    rng = random.Random(seed)
    k8s = pods(streams, rng)
    t0 = 1785147072.0
    written = 0

    def value(i: int, k: int, text: str) -> tuple[bytes, bytes]:
        t = t0 + i * 0.001
        sec = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))
        rec = {
            "@timestamp": t,
            "time": f"{sec}.{int(t * 1e9) % 1_000_000_000:09d}Z",
            "stream": "stderr" if "ERROR" in text or "WARN" in text else "stdout",
            "_p": "F",
            "log": text,
            "kubernetes": k8s[k],
        }
        return str(k8s[k]["docker_id"]).encode(), json.dumps(rec).encode()

    for k in range(streams):
        for text in STARTUP:
            if written >= lines:
                return
            yield value(written, k, text)
            written += 1
    i = 0
    while written < lines:
        k = rng.randrange(streams)
        d = f"07-21 05:{(i // 60) % 60:02d}:{i % 60:02d}"
        if rng.random() < 1e-4:
            text = rng.choice(FAILURES).format(pid=100 + k, d=d, n=k)
        else:
            text = serving_line(rng, d)
        yield value(written, k, text)
        written += 1
        i += 1


def produce(bootstrap: str, topic: str, lines: int) -> tuple[float, int]:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 500000,
            "partitioner": "murmur2_random",  # what Java / kafka-python producers use
        }
    )
    size = 0
    t0 = time.perf_counter()
    for key, value in records(lines):
        size += len(value)
        while True:
            try:
                producer.produce(topic, value=value, key=key)
                break
            except BufferError:
                producer.poll(0.05)
    left = producer.flush(120)
    if left:
        raise SystemExit(f"bench: {left} messages not delivered")
    return time.perf_counter() - t0, size


def consume(bootstrap: str, topic: str, lines: int, client: str, mode: str) -> dict[str, object]:
    """One run (in this process): consume ``lines`` records; the figures as a dict."""
    from service.config import KafkaSettings
    from service.sources.kafka.factory import make_kafka_source

    clf = None
    if mode == "classify":
        from service.classify.loader import build_classifier

        clf = build_classifier(use_model=False)
    settings = KafkaSettings(
        bootstrap=bootstrap,
        topics=[topic],
        group=f"bench-{uuid.uuid4().hex[:8]}",
        client=client,
        session_timeout_ms=6000,
        max_poll_interval_ms=30000,
        max_poll_records=2000,
    )
    state = {"n": 0, "assigned": None, "last": None, "changes": 0}
    done = threading.Event()

    def on_assigned(_partitions: object) -> None:
        if state["assigned"] is None:
            state["assigned"] = time.perf_counter()

    def handler(batch: list) -> None:
        if clf is not None:
            feed = clf.feed
            changes = 0
            for rec in batch:
                changes += len(feed(rec))
            state["changes"] += changes
        state["n"] += len(batch)
        if state["n"] >= lines:
            state["last"] = time.perf_counter()
            done.set()

    source = make_kafka_source(settings, handler, on_assigned=on_assigned, lag_interval_s=5.0)
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    source.start()
    if not done.wait(1800):
        source.stop()
        raise SystemExit(f"bench: only {state['n']} of {lines} records after 30 min")
    cpu = time.process_time() - cpu0
    source.stop()
    elapsed = state["last"] - (state["assigned"] or t0)
    crc_c = None
    if client == "kafka-python":
        from kafka.record import util as record_util

        crc_c = record_util.crc32c_c is not None
    return {
        "client": client,
        "crc32c_c": crc_c,
        "mode": mode,
        "lines": state["n"],
        "seconds": round(elapsed, 2),
        "lines_per_s": round(state["n"] / elapsed),
        "cpu_s": round(cpu, 2),
        "lines_per_cpu_s": round(state["n"] / cpu) if cpu else None,
        "join_s": round((state["assigned"] or t0) - t0, 2),
        "peak_rss_mb": peak_rss_mb(),
        "incident_changes": state["changes"],
    }


def peak_rss_mb() -> int:
    """This process's peak RSS. ``ru_maxrss`` would do on its own, but Linux carries it over
    fork + exec from the parent (the producer), so VmHWM is read first."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024)
    except (OSError, ValueError, IndexError):
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def broker_rss_mb(port: str) -> float | None:
    import tempfile

    pid_file = Path(tempfile.gettempdir()) / f"vllm-sentinel-tansu-{port}.pid"
    try:
        pid = int(pid_file.read_text().split()[0])
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--clients", default="kafka-python,confluent-kafka")
    ap.add_argument("--modes", default="decode,classify")
    ap.add_argument("--bootstrap", help="use this broker instead of starting Tansu")
    ap.add_argument("--topic", help="consume this (already filled) topic; skips producing")
    ap.add_argument("--child", nargs=3, metavar=("TOPIC", "CLIENT", "MODE"), help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.child:
        topic, client, mode = args.child
        print(json.dumps(consume(args.bootstrap, topic, args.lines, client, mode)))
        return 0

    started = None
    bootstrap = args.bootstrap
    if not bootstrap:
        out = subprocess.run(
            [sys.executable, str(TANSU), "start", "--port", "0"],
            capture_output=True,
            text=True,
            check=True,
        )
        bootstrap = started = out.stdout.strip().splitlines()[-1]
    try:
        topic = args.topic
        if not topic:
            from kafka.admin import KafkaAdminClient, NewTopic

            topic = f"bench-{uuid.uuid4().hex[:8]}"
            admin = KafkaAdminClient(bootstrap_servers=bootstrap)
            admin.create_topics([NewTopic(topic, args.partitions, 1)])
            admin.close()
            seconds, size = produce(bootstrap, topic, args.lines)
            print(
                f"produced {args.lines:,} records ({size / 1e6:,.0f} MB JSON) to {topic} "
                f"[{args.partitions} partitions] in {seconds:.1f}s "
                f"({args.lines / seconds:,.0f}/s, confluent-kafka producer)",
                flush=True,
            )
        results = []
        for mode in args.modes.split(","):
            for client in args.clients.split(","):
                proc = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--bootstrap",
                        bootstrap,
                        "--lines",
                        str(args.lines),
                        "--child",
                        topic,
                        client,
                        mode,
                    ],
                    capture_output=True,
                    text=True,
                    env=dict(os.environ, PYTHONWARNINGS="ignore"),
                )
                if proc.returncode != 0:
                    print(proc.stderr[-3000:], file=sys.stderr)
                    raise SystemExit(f"bench: {client}/{mode} failed")
                res = json.loads(proc.stdout.strip().splitlines()[-1])
                results.append(res)
                print(
                    f"  {client:16s} {mode:9s} {res['lines_per_s']:>10,} lines/s  "
                    f"{res['lines_per_cpu_s'] or 0:>10,} lines/cpu-s  rss {res['peak_rss_mb']} MB"
                    f"  load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
        print()
        print(
            f"{args.lines:,} Fluent Bit JSON records, {args.partitions} partitions, Tansu at "
            f"{bootstrap}, {os.cpu_count()} CPUs"
        )
        head = (
            f"| {'backend':30s} | {'handler':23s} | {'lines/s':>9s} | {'lines/cpu-s':>11s} "
            f"| {'wall s':>6s} | {'cpu s':>6s} | {'peak RSS MB':>11s} |"
        )
        print(head)
        print("|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|")
        names = {"decode": "consume+decode", "classify": "consume+decode+classify"}
        for r in results:
            backend = r["client"]
            if r.get("crc32c_c") is not None:
                backend += " (C crc32c)" if r["crc32c_c"] else " (pure-Python crc)"
            print(
                f"| {backend:30s} | {names[r['mode']]:23s} | {r['lines_per_s']:>9,} | "
                f"{r['lines_per_cpu_s'] or 0:>11,} | {r['seconds']:>6} | {r['cpu_s']:>6} | "
                f"{r['peak_rss_mb']:>11} |"
            )
        print(f"load average at the end: {os.getloadavg()[0]:.1f} (1 min)")
        if started:
            rss = broker_rss_mb(started.rpartition(":")[2])
            if rss:
                print(f"Tansu peak RSS: {rss:,.0f} MB")
    finally:
        if started:
            subprocess.run(
                [sys.executable, str(TANSU), "stop", "--port", started.rpartition(":")[2]],
                capture_output=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
