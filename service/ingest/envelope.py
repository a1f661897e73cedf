"""Remove the transport envelope from one input unit and yield plain :class:`LogRecord` s.

A unit is a text line (raw, Docker json-file, CRI) or a record dict (Fluent Bit / Fluentd,
from JSON or msgpack). ``Format.AUTO`` detects the envelope per unit with cheap first-byte
checks; an explicit format is a contract and units that break it are rejected (counted in
:mod:`service.ratelog`).

This module detects and dispatches; each family decodes in its own module:
:mod:`~service.ingest.container_lines` (CRI, Docker), :mod:`~service.ingest.fluent_record`
(a record's line field, meta and stream key), :mod:`~service.ingest.json_text` (JSON in
text, vLLM's JSON logs), :mod:`~service.ingest.salvage` (broken UTF-8, over-long lines), and
:mod:`~service.ingest.lines` (text → one record per physical line).

Records whose line is unfinished (CRI ``P`` chunk, Docker entry without its ``\\n``) carry
``meta[PARTIAL] = True``; pass them through :class:`service.ingest.joiner.Joiner`.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Literal, NamedTuple

from service import ratelog
from service.ingest.container_lines import (
    CriLine,
    cri_records,
    docker_log,
    docker_records,
    split_cri,
)
from service.ingest.fluent_record import (
    FD,
    merged_vllm_json,
    record_meta,
    stream_key,
    text_field,
)
from service.ingest.json_text import json_object
from service.ingest.kube import is_kube_object, kube_records
from service.ingest.lines import line_records
from service.ingest.salvage import clean_text, decode_bytes, truncate
from service.ingest.timestamps import to_epoch
from service.ingest.vllm_json import is_vllm_json, vllm_json_lines
from service.records import LogRecord, Meta, Position, fill_meta

MAX_LINE = 1 << 20  # characters; longer lines are truncated and counted as ``oversize``


class Format(StrEnum):
    """Envelope of the input; ``auto`` detects it per unit."""

    AUTO = "auto"
    RAW = "raw"
    DOCKER = "docker"
    CRI = "cri"
    FLUENT = "fluent"
    VLLM_JSON = "vllm-json"  # vLLM's JSON log records; its other (text) lines kept raw


def decode_line(
    line: str,
    stream: str,
    fmt: Format | str = Format.AUTO,
    position: Position | None = None,
    meta: Meta | None = None,
    source: str = "line",
    max_line: int = MAX_LINE,
) -> list[LogRecord]:
    """Decode one text line (trailing ``\\n`` optional) into records.

    ``line`` must be proper text (bytes decoded with ``errors="replace"``); text coming out
    of JSON or msgpack inside the line is cleaned of lone surrogates here.

    ``stream`` is the fallback stream key (file path, Kafka key ...); ``meta`` is what the
    source already knows (e.g. from the file path) and only fills keys the envelope lacks.
    """
    if line.endswith("\n"):
        line = line[:-1]
    if fmt is Format.AUTO or fmt == Format.AUTO:
        first = line[:1]
        if first == "{":
            obj = json_object(line)
            if obj is not None and (text_field(obj) is not None or is_kube_object(obj)):
                return _decode_dict_line(obj, stream, position, meta, source, max_line)
        elif "0" <= first <= "9":
            cri = split_cri(line)
            if cri is not None:
                return _cri(cri, stream, position, meta, source, max_line)
    elif fmt == Format.VLLM_JSON:
        obj = json_object(line) if line[:1] == "{" else None
        if obj is not None and is_vllm_json(obj):
            rec_meta: Meta = meta.copy() if meta else {}
            key = stream_key(rec_meta, stream) if meta else stream
            return line_records(
                "\n".join(vllm_json_lines(obj)),
                key,
                None,
                rec_meta,
                position,
                False,
                source,
                max_line,
            )
    elif fmt == Format.CRI:
        cri = split_cri(line)
        if cri is None:
            ratelog.reject(source, "bad_cri", line)
            return []
        return _cri(cri, stream, position, meta, source, max_line)
    elif fmt == Format.DOCKER or fmt == Format.FLUENT:
        obj = json_object(line) if line[:1] == "{" else None
        if obj is None or (
            text_field(obj) is None and (fmt == Format.DOCKER or not is_kube_object(obj))
        ):
            ratelog.reject(source, "bad_docker" if fmt == Format.DOCKER else "bad_record", line)
            return []
        if fmt == Format.FLUENT:
            return decode_record(
                obj,
                stream=stream,
                position=position,
                meta=meta,
                source=source,
                fmt=Format.FLUENT,
                max_line=max_line,
            )
        return _decode_dict_line(obj, stream, position, meta, source, max_line)
    if len(line) > max_line:
        line = truncate(line, max_line, source)
    if not meta:
        return [LogRecord(stream, line, None, {}, position)]
    rec_meta = meta.copy()
    return [LogRecord(stream_key(rec_meta, stream), line, None, rec_meta, position)]


def decode_record(
    record: Mapping[str, Any],
    *,
    stream: str | None = None,
    tag: str | None = None,
    time: Any = None,
    position: Position | None = None,
    meta: Meta | None = None,
    fmt: Format | str = Format.AUTO,
    source: str = "record",
    max_line: int = MAX_LINE,
) -> list[LogRecord]:
    """Decode a Fluent Bit / Fluentd record (``log`` or ``message`` + CRI/Docker fields +
    ``kubernetes``/``docker`` metadata) into records.

    ``time`` is the transport's event time (Forward entry time, msgpack chunk time); the
    record's own runtime ``time`` wins over it, and it wins over ``@timestamp``/``date``.
    ``fmt`` ``cri``/``docker`` say the record's ``log`` is still an unparsed CRI/Docker
    line; ``auto`` detects that when the record has no ``stream``/``_p``/``logtag``.
    """
    text = text_field(record)
    if ("involvedObject" in record or text is None) and is_kube_object(record):
        # a Kubernetes Event / Pod / list of them: evidence lines of the pod's stream
        return kube_records(
            record, time=time, position=position, meta={"tag": tag} if tag else None
        )
    if "levelname" in record and is_vllm_json(record):  # vLLM JSON (Fluent Bit merged it)
        text = "\n".join(vllm_json_lines(record))
    if type(text) is not str:
        if isinstance(text, bytes | bytearray):
            text = decode_bytes(text, source)
        elif type(text) is dict and is_vllm_json(text):  # log decoded as JSON
            text = "\n".join(vllm_json_lines(text))
        elif text is None and (nested := merged_vllm_json(record)) is not None:
            text = "\n".join(vllm_json_lines(nested))  # Merge_Log_Key
        else:
            ratelog.reject(source, "no_log_field", repr(record)[:200])
            return []
    elif not text.isascii():
        text = clean_text(text, source)
    fd = record.get("stream")
    flag = record.get("_p") or record.get("logtag")
    partial = flag == "P"
    t = to_epoch(record.get("time"))
    docker_style = False
    if flag is None and fmt != Format.RAW and fmt != Format.FLUENT and "stream" not in record:
        inner = _inner_envelope(text, fmt, source)
        if inner is False:
            return []
        if inner is not None:
            t, fd, partial, text, docker_style = inner
    if t is None:
        t = (
            to_epoch(time)
            or to_epoch(record.get("@timestamp"))
            or to_epoch(record.get("date"))
            or to_epoch(record.get("timestamp"))
        )
    rec_meta = record_meta(record, tag, fd)
    if meta:
        fill_meta(rec_meta, meta)
    key = stream_key(rec_meta, stream or tag or source)
    if docker_style:
        return docker_records(text, key, t, rec_meta, position, source, max_line)
    if text.endswith("\n"):
        text = text[:-1]
    return line_records(text, key, t, rec_meta, position, partial, source, max_line)


def decode_text(
    text: str,
    stream: str,
    *,
    fmt: Format | str = Format.AUTO,
    position: Position | None = None,
    meta: Meta | None = None,
    source: str = "text",
    max_line: int = MAX_LINE,
) -> list[LogRecord]:
    """Decode a blob of ``\\n``-separated lines (a raw Kafka value, a text/plain body); every
    line is decoded as by :func:`decode_line`, positions after the first get ``#<i>``."""
    if "\n" not in text or text.find("\n") == len(text) - 1:
        return decode_line(
            text, stream, fmt=fmt, position=position, meta=meta, source=source, max_line=max_line
        )
    lines = text.split("\n")
    if not lines[-1]:
        lines.pop()
    out: list[LogRecord] = []
    for i, line in enumerate(lines):
        pos = position if i == 0 or position is None else position.sub(i)
        out.extend(
            decode_line(
                line, stream, fmt=fmt, position=pos, meta=meta, source=source, max_line=max_line
            )
        )
    return out


def _decode_dict_line(
    obj: Mapping[str, Any],
    stream: str,
    position: Position | None,
    meta: Meta | None,
    source: str,
    max_line: int,
) -> list[LogRecord]:
    """A JSON line: Docker json-file entry when it has only Docker's keys, else a record."""
    text = docker_log(obj, source)
    if text is not None:
        fd = obj.get("stream")
        rec_meta: Meta = meta.copy() if meta else {}
        if type(fd) is str and fd in FD:
            rec_meta["fd"] = FD[fd]
        key = stream_key(rec_meta, stream)
        return docker_records(
            text, key, to_epoch(obj.get("time")), rec_meta, position, source, max_line
        )
    return decode_record(
        obj, stream=stream, position=position, meta=meta, source=source, max_line=max_line
    )


def _cri(
    cri: CriLine,
    stream: str,
    position: Position | None,
    meta: Meta | None,
    source: str,
    max_line: int,
) -> list[LogRecord]:
    """A CRI line's records under the stream key ``meta`` names (else ``stream``)."""
    if not meta:
        return cri_records(cri, stream, position, {}, source, max_line)
    rec_meta = meta.copy()
    return cri_records(cri, stream_key(rec_meta, stream), position, rec_meta, source, max_line)


class _Unwrapped(NamedTuple):
    """A record's ``log`` that was itself a CRI or Docker line."""

    time: float | None
    fd: Any  # "stdout" / "stderr" when the inner envelope names one
    partial: bool
    text: str
    docker: bool  # a Docker ``log``: its trailing newline still says whether it ended


def _inner_envelope(
    text: str, fmt: Format | str, source: str
) -> _Unwrapped | None | Literal[False]:
    """A record whose ``log`` is itself a CRI or Docker line (the collector did not parse):
    its parts; ``None`` if not; ``False`` if ``fmt`` demanded one and it is missing (already
    counted)."""
    first = text[:1]
    if fmt != Format.DOCKER and "0" <= first <= "9":
        cri = split_cri(text[:-1] if text.endswith("\n") else text)
        if cri is not None:
            return _Unwrapped(cri[0], cri[1], cri[2], cri[3], False)
    elif fmt != Format.CRI and first == "{":
        obj = json_object(text)
        if obj is not None and (inner := docker_log(obj, source)) is not None:
            return _Unwrapped(to_epoch(obj.get("time")), obj.get("stream"), False, inner, True)
    if fmt == Format.CRI or fmt == Format.DOCKER:
        ratelog.reject(source, "bad_cri" if fmt == Format.CRI else "bad_docker", text)
        return False
    return None
