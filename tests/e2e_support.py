"""Run the real service (``vllm-sentinel serve``) as subprocesses and feed it the way
collectors do; shared by tests/test_e2e_service.py and scripts/bench_e2e.py.

* :class:`Sentinel` — one ``vllm-sentinel serve --config <yaml>`` process on free ports:
  start, wait until ready / until it owns Kafka partitions, query the API and /metrics,
  SIGTERM (exit code) or SIGKILL it, read its log.
* :func:`fluent_bit_records` — a real log as Fluent Bit's ``kafka`` output sends it
  (``format json``, ``@timestamp`` iso8601_ns, ``stream``/``_p``/``log`` from the cri
  multiline parser, the nested ``kubernetes`` map, ``sentinel_key`` = ``namespace/pod`` as the
  message key); times are moved so the log ends now (a live stream).
* :class:`Expected` — the same records through an in-process classifier: the incident ids,
  categories and line counts the service must end up with.
* :class:`Db` — read-only views of the service's tables (settled = nothing left to send).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "fixtures" / "real"
CORPUS = ROOT / "tests" / "corpus" / "cases"
SENTINEL_BIN = ROOT / ".venv" / "bin" / "vllm-sentinel"

# Tansu group timing (see service/sources/kafka/client_config.py): join ~1 s, takeover ~2-3 s.
FAST_KAFKA = {
    "session_timeout_ms": 2000,
    "max_poll_interval_ms": 5000,
    "max_poll_records": 500,
    "extra": {"heartbeat_interval_ms": 500},
}
SECRET = "e2e-webhook-secret"
IMAGE = "vllm/vllm-openai:v0.11.0"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_until(
    predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.1
) -> Any:
    """Poll ``predicate`` until it returns something truthy (returned) or fail after
    ``timeout`` seconds, naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


# ---- collector records ---------------------------------------------------------------------
def iso_ns(t: float) -> str:
    """Fluent Bit ``Timestamp_Format iso8601_ns``."""
    d = dt.datetime.fromtimestamp(t, dt.UTC)
    return d.strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"


def kubernetes_map(
    namespace: str, pod: str, node: str = "gpu-node-1", container: str = "vllm"
) -> dict[str, Any]:
    cid = uuid.uuid5(uuid.NAMESPACE_URL, f"{namespace}/{pod}").hex * 2
    return {
        "pod_name": pod,
        "namespace_name": namespace,
        "pod_id": str(uuid.uuid5(uuid.NAMESPACE_DNS, pod)),
        "labels": {"app.kubernetes.io/name": "vllm", "pod-template-hash": "7d9f8b6c4"},
        "host": node,
        "container_name": container,
        "docker_id": cid,
        "container_hash": f"docker.io/{IMAGE}@sha256:" + "4b1d" * 16,
        "container_image": IMAGE,
    }


def log_lines(path: Path | str) -> list[tuple[float | None, str, str]]:
    """(time, fd, text) of each whole line of a real log (CRI, Docker or raw; runtime chunks
    joined, as Fluent Bit's docker/cri multiline parsers do)."""
    from service.sources.files import read_files

    return [(r.time, r.meta.get("fd") or "stdout", r.text) for r in read_files([str(path)])]


def fluent_bit_records(
    path: Path | str,
    namespace: str,
    pod: str,
    *,
    end: float | None = None,
    node: str = "gpu-node-1",
) -> list[dict[str, Any]]:
    """The records Fluent Bit (tail + cri/docker multiline + kubernetes filter + the
    sentinel_key Lua filter) ships to Kafka for one container's log, ending at ``end``."""
    lines = log_lines(path)
    end = time.time() if end is None else end
    stamps = [t for t, _, _ in lines if t is not None]
    last = max(stamps) if stamps else None
    kube = kubernetes_map(namespace, pod, node)
    out = []
    for i, (t, fd, text) in enumerate(lines):
        # keep the capture's spacing, end now; lines without a time: 1 ms apart
        at = (
            end - (last - t)
            if (t is not None and last is not None)
            else end - (len(lines) - i) * 0.001
        )
        out.append(
            {
                "@timestamp": iso_ns(at),
                "stream": fd,
                "_p": "F",
                "log": text,
                "kubernetes": kube,
                "sentinel_key": f"{namespace}/{pod}",
            }
        )
    return out


def kafka_message(record: dict[str, Any]) -> tuple[bytes, bytes]:
    """(key, value) as the kafka output sends it: ``Message_Key_Field sentinel_key``."""
    return record["sentinel_key"].encode(), json.dumps(record, ensure_ascii=False).encode()


def partition_of(key: bytes, partitions: int) -> int:
    """Where murmur2 (Fluent Bit ``murmur2_random``, kafka-python's default) puts ``key``."""
    from kafka.partitioner import murmur2

    return (murmur2(key) & 0x7FFFFFFF) % partitions


def pods_per_partition(
    namespace: str, prefix: str, partitions: int, per_partition: int
) -> list[str]:
    """Pod names whose keys spread evenly: ``per_partition`` on each partition."""
    want = {p: per_partition for p in range(partitions)}
    pods: list[str] = []
    i = 0
    while any(want.values()):
        pod = f"{prefix}-{i}"
        p = partition_of(f"{namespace}/{pod}".encode(), partitions)
        if want[p]:
            want[p] -= 1
            pods.append(pod)
        i += 1
    return pods


def interleave(streams: Iterable[list[Any]]) -> list[Any]:
    """Round-robin merge (each stream keeps its order), like a node's collector tailing
    several containers at once."""
    lists = [list(s) for s in streams]
    out: list[Any] = []
    i = 0
    while any(i < len(s) for s in lists):
        for s in lists:
            if i < len(s):
                out.append(s[i])
        i += 1
    return out


def produce(
    bootstrap: str,
    topic: str,
    messages: Iterable[tuple[bytes | None, bytes]],
    *,
    pace: Callable[[int], None] | None = None,
) -> int:
    """Send ``(key, value)`` messages with kafka-python (murmur2 on the key), in order;
    ``pace(i)`` is called before message ``i`` (throttling). Returns the count, all acked."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks="all")
    n = 0
    try:
        futures = []
        for n, (k, v) in enumerate(messages, 1):
            if pace is not None:
                pace(n - 1)
            futures.append(producer.send(topic, key=k, value=v))
        producer.flush()
        for f in futures:
            f.get(timeout=30)
    finally:
        producer.close()
    return n


# ---- what the service must end up with -----------------------------------------------------
@dataclass
class Expected:
    """The produced values through the same decoder and an in-process classifier."""

    lines: dict[str, int] = field(default_factory=dict)  # stream → line count (seq)
    incidents: dict[str, dict[str, Any]] = field(default_factory=dict)  # id → summary
    notifiable: dict[str, list[str]] = field(default_factory=dict)  # id → change kinds

    @classmethod
    def of(
        cls, messages: Iterable[tuple[bytes | None, bytes | None]], use_model: bool = True
    ) -> Expected:
        from service.classify.loader import build_classifier
        from service.sources.kafka.value import decode_kafka_value

        clf = build_classifier(use_model=use_model)
        exp = cls()
        latest: dict[str, Any] = {}
        for offset, (k, v) in enumerate(messages):
            for rec in decode_kafka_value(v, k, "t", 0, offset):
                for ch in clf.feed(rec):
                    latest[ch.incident.id] = ch.incident
                    if ch.kind != "evidence":
                        exp.notifiable.setdefault(ch.incident.id, []).append(ch.kind)
        for key, st in clf.tracker.streams.items():
            exp.lines[key] = st.seq
        exp.incidents = {
            i: inc.summary() | {"stream": inc.stream, "meta": inc.meta} for i, inc in latest.items()
        }
        return exp

    def critical(self) -> dict[str, dict[str, Any]]:
        return {i: s for i, s in self.incidents.items() if s["severity"] == "critical"}


# ---- the service process -------------------------------------------------------------------
def service_config(
    *,
    store_url: str,
    api_port: int,
    kafka: dict[str, Any] | None = None,
    forward_port: int | None = None,
    receivers: list[dict[str, Any]] = (),
    token: str | None = None,
    notify: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "api": {"host": "127.0.0.1", "port": api_port, "token": token},
        "store": {"url": store_url},
        "sources": {
            "kafka": kafka,
            "forward": None
            if forward_port is None
            else {"host": "127.0.0.1", "port": forward_port},
            "http": True,
        },
        "receivers": list(receivers),
        "notify": {
            "group_wait_s": 0.5,
            "backoff_base_s": 0.2,
            "backoff_max_s": 1.0,
            "external_url": f"http://127.0.0.1:{api_port}",
            **(notify or {}),
        },
    }
    cfg.update(extra)
    return cfg


def kafka_source(
    bootstrap: str, topic: str, group: str, client: str = "kafka-python", **changes: Any
) -> dict[str, Any]:
    return {
        "bootstrap": bootstrap,
        "topics": [topic],
        "group": group,
        "client": client,
        **FAST_KAFKA,
        **changes,
    }


def webhook(url: str, name: str = "oncall", **changes: Any) -> dict[str, Any]:
    return {
        "name": name,
        "type": "webhook",
        "url": url,
        "secret": SECRET,
        "timeout_s": 2.0,
        "rate_limit_per_minute": 600,
        **changes,
    }


class Sentinel:
    """One ``vllm-sentinel serve`` process (restartable with the same config)."""

    def __init__(self, workdir: Path, name: str, config: dict[str, Any]) -> None:
        self.name = name
        self.config = config
        self.api_port = config["api"]["port"]
        self.token = config["api"].get("token")
        self.config_path = workdir / f"{name}.yaml"
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.log_path = workdir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.api_port}", timeout=10.0)

    # ---- lifecycle -------------------------------------------------------------------
    def start(self) -> Sentinel:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        env = {k: v for k, v in os.environ.items() if not k.startswith("SENTINEL_")}
        cmd = (
            [str(SENTINEL_BIN)] if SENTINEL_BIN.exists() else [sys.executable, "-m", "service.cli"]
        )
        self.starts += 1
        with self.log_path.open("ab") as log:
            log.write(f"\n===== start {self.starts} =====\n".encode())
            self.proc = subprocess.Popen(
                [*cmd, "serve", "--config", str(self.config_path)],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, timeout: float = 40.0) -> Sentinel:
        def ready() -> bool:
            if not self.alive():
                raise AssertionError(
                    f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}"
                )
            try:
                return self.http.get("/readyz", timeout=2.0).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(ready, timeout, f"{self.name} to be ready", interval=0.1)
        return self

    def assigned(self) -> list[str]:
        kafka = self.readiness().get("checks", {}).get("kafka") or {}
        return kafka.get("assigned") or []

    def wait_assigned(self, timeout: float = 30.0) -> list[str]:
        return wait_until(self.assigned, timeout, f"{self.name} to own Kafka partitions")

    def terminate(self, timeout: float = 15.0) -> int:
        """SIGTERM and wait; the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def close(self) -> None:
        if self.alive():
            with contextlib.suppress(Exception):
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(10)
        if self.alive():
            self.kill()
        self.http.close()

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    # ---- API -------------------------------------------------------------------------
    def headers(self, token: str | None = "default") -> dict[str, str]:
        token = self.token if token == "default" else token
        return {"Authorization": f"Bearer {token}"} if token else {}

    def readiness(self) -> dict[str, Any]:
        r = self.http.get("/readyz")
        return r.json()

    def incidents(self, **params: Any) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        cursor = None
        while True:
            q = {"limit": 500, **params, **({"cursor": cursor} if cursor else {})}
            r = self.http.get("/incidents", params=q)
            r.raise_for_status()
            page = r.json()
            items += page["items"]
            cursor = page.get("next_cursor")
            if not cursor:
                return items

    def stream(self, key: str) -> dict[str, Any] | None:
        r = self.http.get(f"/streams/{key}")
        if r.status_code == 404:
            return None
        r.raise_for_status()
        return r.json()

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples of ``name`` whose labels include ``labels``."""
        from prometheus_client.parser import text_string_to_metric_families

        text = self.http.get("/metrics").text
        total = 0.0
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    total += s.value
        return total


# ---- the database --------------------------------------------------------------------------
class Db:
    """Read-only look at a service's store (the test's own connection)."""

    def __init__(self, url: str) -> None:
        from service.store.engine import make_engine

        self.engine = make_engine(url, 2)

    def rows(self, sql: str, **params: Any) -> list[dict[str, Any]]:
        from sqlalchemy import text

        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(text(sql), params).mappings()]

    def scalar(self, sql: str, **params: Any) -> Any:
        from sqlalchemy import text

        with self.engine.connect() as conn:
            return conn.execute(text(sql), params).scalar()

    def unexpanded(self) -> int:
        return int(self.scalar("SELECT count(*) FROM outbox WHERE expanded_at IS NULL"))

    def pending(self) -> int:
        return int(self.scalar("SELECT count(*) FROM deliveries WHERE status = 'pending'"))

    def leased(self) -> int:
        return int(self.scalar("SELECT count(*) FROM deliveries WHERE lease_until IS NOT NULL"))

    def settled(self) -> bool:
        """Every committed change was turned into deliveries and none is waiting."""
        return self.unexpanded() == 0 and self.pending() == 0

    def incident_versions(self) -> dict[str, int]:
        return {r["id"]: int(r["version"]) for r in self.rows("SELECT id, version FROM incidents")}

    def close(self) -> None:
        self.engine.dispose()


# ---- long streams --------------------------------------------------------------------------
HEALTHY_LOG = REAL / "healthy-serving-prefix-caching-sigterm.cri.log"
_STARTUP_DONE = "Application startup complete."


def serving_records(
    namespace: str, pod: str, n_lines: int, *, end: float | None = None, step_s: float = 0.01
) -> list[dict[str, Any]]:
    """A healthy pod that started and keeps serving: the real startup of
    :data:`HEALTHY_LOG`, then its serving lines (access log, engine stats) over and over,
    ``n_lines`` in all, ``step_s`` apart, the last at ``end``."""
    recs = fluent_bit_records(HEALTHY_LOG, namespace, pod)
    ready = next(i for i, r in enumerate(recs) if r["log"].endswith(_STARTUP_DONE))
    head = recs[: ready + 1]
    loop = [
        r
        for r in recs[ready + 1 :]
        if "[shutdown]" not in r["log"] and ("HTTP/1.1" in r["log"] or "Engine 000:" in r["log"])
    ]
    out = list(head[:n_lines])
    i = 0
    while len(out) < n_lines:
        out.append(dict(loop[i % len(loop)]))
        i += 1
    end = time.time() if end is None else end
    for j, r in enumerate(out):
        r["@timestamp"] = iso_ns(end - (len(out) - 1 - j) * step_s)
    return out


def spread(base: list[Any], bursts: list[list[Any]]) -> list[Any]:
    """``base`` with each burst inserted whole at evenly spaced points (a crashing container
    prints its traceback at once), so failures happen all along the stream."""
    out: list[Any] = []
    k = len(bursts)
    points = [len(base) * (i + 1) // (k + 1) for i in range(k)]
    prev = 0
    for point, burst in zip(points, bursts, strict=True):
        out += base[prev:point]
        out += burst
        prev = point
    out += base[prev:]
    return out
