"""Helpers for the API tests: a real Store on a temp SQLite file, a real Pipeline, and real
vLLM captures turned into what Fluent Bit's http output sends."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from service.classify.engine import Classifier
from service.classify.rulebook import RuleBook
from service.config import ApiSettings, Settings
from service.context import ServiceContext
from service.ingest.container_lines import split_cri
from service.pipeline import Pipeline
from service.sources.http.endpoint import HttpEndpoint, http_sources
from service.store import Store

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "fixtures" / "real"
CORPUS = ROOT / "tests" / "corpus" / "cases"
WRITE_TOKEN = "write-token-0123456789abcdef"
READ_TOKEN = "read-token-0123456789abcdef"
WRITE = {"Authorization": f"Bearer {WRITE_TOKEN}"}
READ = {"Authorization": f"Bearer {READ_TOKEN}"}


def make_context(
    db: Path,
    rulebook: RuleBook,
    *,
    token: str | None = WRITE_TOKEN,
    read_token: str | None = None,
    http: bool = True,
    host: str = "127.0.0.1",
) -> ServiceContext:
    settings = Settings(api=ApiSettings(token=token, read_token=read_token, host=host))
    settings.sources.http = http
    store = Store(f"sqlite:///{db}")
    store.migrate()
    pipeline = Pipeline(store, Classifier(rulebook))
    sources = http_sources(http)  # the HTTP doors, started as the service starts them
    for source in sources:
        _run(source.start(pipeline))
    return ServiceContext(
        settings=settings,
        store=store,
        pipeline=pipeline,
        rulebook=rulebook,
        text_model=None,
        ready=True,
        sources=sources,
    )


def _run(step: Coroutine[Any, Any, None]) -> None:
    """Run a source's start or stop, from a test's event loop too (on a thread of its own)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(step)
        return
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, step).result()


def endpoint_in(ctx: ServiceContext, source: str) -> HttpEndpoint:
    """The context's endpoint of ``source`` (``http``, ``otlp``), whose limits a test lowers."""
    (endpoint,) = (s for s in ctx.sources if isinstance(s, HttpEndpoint) and s.source == source)
    return endpoint


def close_context(ctx: ServiceContext) -> None:
    for source in ctx.sources:  # the lines held unfinished are stored, as at shutdown
        _run(source.stop())
    ctx.pipeline.close()
    ctx.store.close()


def kube(
    namespace: str,
    pod: str,
    container: str = "vllm",
    node: str = "gpu-node-1",
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The ``kubernetes`` map of Fluent Bit's kubernetes filter."""
    return {
        "pod_name": pod,
        "namespace_name": namespace,
        "container_name": container,
        "pod_id": f"uid-{pod}",
        "host": node,
        "docker_id": "c" * 64,
        "container_image": "vllm/vllm-openai:v0.32.0",
        "labels": labels or {"app": pod},
    }


def fluentbit_records(cri_log: Path, k8s: dict[str, Any]) -> list[dict[str, Any]]:
    """A CRI capture as Fluent Bit (tail + multiline cri + kubernetes, http ``format json``)
    sends it: ``date`` (json_date_key), ``time``, ``stream``, ``_p``, ``log``, ``kubernetes``."""
    out: list[dict[str, Any]] = []
    with cri_log.open(encoding="utf-8", errors="replace", newline="\n") as fh:
        for raw in fh:
            line = raw.rstrip("\n")
            parsed = split_cri(line)
            if parsed is None:
                continue
            t, fd, partial, content = parsed
            out.append(
                {
                    "date": t,
                    "time": line.split(" ", 1)[0],
                    "stream": fd,
                    "_p": "P" if partial else "F",
                    "log": content,
                    "kubernetes": k8s,
                }
            )
    return out


def json_array(records: list[dict[str, Any]]) -> bytes:
    return json.dumps(records).encode()


def ndjson(records: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def label(case: Path) -> dict[str, Any]:
    return json.loads(case.with_suffix(".json").read_text(encoding="utf-8"))
