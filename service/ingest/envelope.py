"""Remove the transport envelope from one input unit and yield plain :class:`LogRecord` s.

A unit is a text line (raw, Docker json-file, CRI) or a record dict (Fluent Bit / Fluentd,
from JSON or msgpack). ``Format.AUTO`` detects the envelope per unit with cheap first-byte
checks; an explicit format is a contract and units that break it are rejected.

Records whose line is unfinished (CRI ``P`` chunk, Docker entry without its ``\\n``) carry
``meta[PARTIAL] = True``; pass them through :class:`service.ingest.joiner.Joiner`.
A ``log`` holding several lines becomes several records; their positions get ``#1``,
``#2`` ... suffixes after the first so that each stays unique.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from service import ratelog
from service.ingest.kube import is_kube_object, kube_records
from service.ingest.runtime_paths import path_meta
from service.ingest.timestamps import parse_rfc3339, to_epoch
from service.ingest.vllm_json import is_vllm_json, vllm_json_lines
from service.records import LogRecord

PARTIAL = "partial"  # meta key set on chunks of a longer line (consumed by the joiner)
MAX_LINE = 1 << 20  # characters; longer lines are truncated and counted as ``oversize``

_DOCKER_KEYS = frozenset(("log", "stream", "time", "attrs"))
_FD = {"stdout": "stdout", "stderr": "stderr"}
_SCAN_JSON = json.JSONDecoder().scan_once  # C scanner: json.loads minus its Python wrapper
_SURROGATE = re.compile("[\ud800-\udfff]")


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
    position: str | None = None,
    meta: Mapping[str, Any] | None = None,
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
            obj = _json_dict(line)
            if obj is not None and (text_field(obj) is not None or is_kube_object(obj)):
                return _decode_dict_line(obj, stream, position, meta, source, max_line)
        elif "0" <= first <= "9":
            cri = split_cri(line)
            if cri is not None:
                return _cri_records(cri, stream, position, meta, source, max_line)
    elif fmt == Format.VLLM_JSON:
        obj = _json_dict(line) if line[:1] == "{" else None
        if obj is not None and is_vllm_json(obj):
            rec_meta = dict(meta) if meta else {}
            key = stream_key(rec_meta, stream) if meta else stream
            return _records(
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
        return _cri_records(cri, stream, position, meta, source, max_line)
    elif fmt == Format.DOCKER or fmt == Format.FLUENT:
        obj = _json_dict(line) if line[:1] == "{" else None
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
        line = _truncate(line, max_line, source)
    if not meta:
        return [LogRecord(stream, line, None, {}, position)]
    rec_meta = dict(meta)
    return [LogRecord(stream_key(rec_meta, stream), line, None, rec_meta, position)]


def decode_record(
    record: Mapping[str, Any],
    *,
    stream: str | None = None,
    tag: str | None = None,
    time: Any = None,
    position: str | None = None,
    meta: Mapping[str, Any] | None = None,
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
            text = decode_bytes(bytes(text), source)
        elif type(text) is dict and is_vllm_json(text):  # log decoded as JSON
            text = "\n".join(vllm_json_lines(text))
        elif text is None and (nested := _merged_vllm_json(record)) is not None:
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
        for key, value in meta.items():
            rec_meta.setdefault(key, value)
    key = stream_key(rec_meta, stream or tag or source)
    if docker_style:
        return _docker_text(text, key, t, rec_meta, position, source, max_line)
    if text.endswith("\n"):
        text = text[:-1]
    return _records(text, key, t, rec_meta, position, partial, source, max_line)


def decode_text(
    text: str,
    stream: str,
    *,
    fmt: Format | str = Format.AUTO,
    position: str | None = None,
    meta: Mapping[str, Any] | None = None,
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
        pos = position if i == 0 or position is None else f"{position}#{i}"
        out.extend(
            decode_line(
                line, stream, fmt=fmt, position=pos, meta=meta, source=source, max_line=max_line
            )
        )
    return out


def record_meta(record: Mapping[str, Any], tag: str | None, fd: Any) -> dict[str, Any]:
    """``LogRecord.meta`` from a record's ``kubernetes``/``docker`` maps, its ``stream`` and
    the Fluent tag (a kubelet-path tag fills what the maps lack)."""
    meta: dict[str, Any] = {}
    kube = record.get("kubernetes")
    if type(kube) is dict:  # straight-line on purpose: this runs for every record
        get = kube.get
        v = get("namespace_name") or get("namespace")
        if type(v) is str and v:
            meta["namespace"] = v
        v = get("pod_name")
        if type(v) is str and v:
            meta["pod"] = v
        v = get("container_name")
        if type(v) is str and v:
            meta["container"] = v
        v = get("docker_id") or get("container_id")
        if type(v) is str and v:
            meta["container_id"] = v
        v = get("pod_id")
        if type(v) is str and v:
            meta["pod_id"] = v
        v = get("host")
        if type(v) is str and v:
            meta["node"] = v
        v = get("container_image")
        if type(v) is str and v:
            meta["image"] = v
        v = get("container_hash") or get("container_image_id")
        if type(v) is str and v:
            meta["image_id"] = v
        v = get("labels")
        if type(v) is dict:
            meta["labels"] = v
    if "container_id" not in meta:
        docker = record.get("docker")
        if type(docker) is dict:
            v = docker.get("container_id") or docker.get("id")
            if type(v) is str and v:
                meta["container_id"] = v
    cid = meta.get("container_id")
    if cid is not None and "://" in cid:
        meta["container_id"] = cid.split("://", 1)[1]  # containerd://<id>, docker://<id>
    if fd == "stdout" or fd == "stderr":
        meta["fd"] = _FD[fd]
    if tag:
        meta["tag"] = tag
        if "pod" not in meta:
            for key, value in path_meta(tag).items():
                meta.setdefault(key, value)
    return meta


def stream_key(meta: Mapping[str, Any], default: str) -> str:
    """``namespace/pod/container`` when known (stable across container restarts), else the
    container id, else the Fluent tag, else ``default``."""
    ns = meta.get("namespace")
    pod = meta.get("pod")
    container = meta.get("container")
    if ns and pod and container:
        return f"{ns}/{pod}/{container}"
    return meta.get("container_id") or meta.get("tag") or default


def split_cri(line: str) -> tuple[float, str, bool, str] | None:
    """``<RFC3339Nano> <stdout|stderr> <P|F>[:tags] <content>`` → (time, fd, partial, content)."""
    sp = line.find(" ", 19)
    if sp < 19 or sp > 40:
        return None
    if line.startswith("stdout ", sp + 1):
        fd = "stdout"
    elif line.startswith("stderr ", sp + 1):
        fd = "stderr"
    else:
        return None
    i = sp + 8
    flag = line[i : i + 1]
    if flag != "F" and flag != "P":
        return None
    end = line.find(" ", i)
    if end < 0:
        if line[i + 1 : i + 2] not in ("", ":"):
            return None
        content = ""
    else:
        if end != i + 1 and line[i + 1] != ":":
            return None
        content = line[end + 1 :]
    t = parse_rfc3339(line[:sp])
    if t is None:
        return None
    return t, fd, flag == "P", content


def clean_text(text: str, source: str) -> str:
    """Replace lone surrogates (escaped ``\\udcxx`` in JSON, undecodable msgpack str bytes)
    with U+FFFD and count ``invalid_utf8``; valid text is returned unchanged."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        ratelog.reject(source, "invalid_utf8", text)
        return _SURROGATE.sub("\ufffd", text)


def decode_bytes(data: bytes, source: str) -> str:
    """UTF-8 text of ``data``; invalid bytes become U+FFFD and count one ``invalid_utf8``."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        ratelog.reject(source, "invalid_utf8", repr(data[:200]))
        return data.decode("utf-8", "replace")


def has_line(record: Mapping[str, Any]) -> bool:
    """Whether :func:`decode_record` can take ``record``: it has a line field (text or
    bytes; a vLLM JSON record parsed into a map), or it is a Kubernetes object."""
    text = text_field(record)
    if type(text) is str or isinstance(text, bytes | bytearray):
        return True
    if type(text) is dict:
        return is_vllm_json(text)
    return is_kube_object(record) or _merged_vllm_json(record) is not None


def text_field(record: Mapping[str, Any]) -> Any:
    """The record's line: ``log``, else ``message`` (classic CRI parser, JSON app logs), else
    ``MESSAGE`` (journald); ``None`` when it has none."""
    text = record.get("log")
    if text is None:
        text = record.get("message")
        if text is None:
            text = record.get("MESSAGE")
    return text


try:  # optional speed-up (pyproject dependency); the stdlib scanner below is the fallback
    from orjson import loads as _ORJSON
except ImportError:  # pragma: no cover
    _ORJSON = None


def parse_json(text: str) -> Any:
    """The single JSON value ``text`` holds (orjson, about three times faster than the
    stdlib's C scanner on Fluent records; the scanner when orjson is absent); raise
    ``ValueError`` (or ``RecursionError``) if it holds anything else."""
    if _ORJSON is not None:
        try:
            return _ORJSON(text)
        except ValueError:
            pass  # e.g. an escaped lone surrogate, which the stdlib scanner accepts
    try:
        obj, end = _SCAN_JSON(text, 0)
    except StopIteration:
        raise ValueError("not a JSON value") from None
    if end != len(text) and not text[end:].isspace():
        raise ValueError("extra data after the JSON value")
    return obj


def expand_vllm_json(text: str) -> str | None:
    """The lines (``\\n``-joined) vLLM's text formatter prints for ``text`` when it is one
    of vLLM's JSON log records (see :mod:`service.ingest.vllm_json`), else None."""
    if text[:1] != "{" or '"levelname"' not in text:
        return None
    obj = _json_dict(text)
    if obj is None or not is_vllm_json(obj):
        return None
    return "\n".join(vllm_json_lines(obj))


def _merged_vllm_json(record: Mapping[str, Any]) -> dict[str, Any] | None:
    """A vLLM JSON record a collector parsed into a key of its own (Fluent Bit
    ``Merge_Log_Key``) when the record has no line field."""
    for value in record.values():
        if type(value) is dict and is_vllm_json(value):
            return value
    return None


def _json_dict(line: str) -> dict[str, Any] | None:
    try:
        obj = parse_json(line)
    except (ValueError, RecursionError):
        return None
    return obj if type(obj) is dict else None


def _decode_dict_line(
    obj: dict[str, Any],
    stream: str,
    position: str | None,
    meta: Mapping[str, Any] | None,
    source: str,
    max_line: int,
) -> list[LogRecord]:
    """A JSON line: Docker json-file entry when it has only Docker's keys, else a record."""
    text = obj.get("log")
    if type(text) is str and obj.keys() <= _DOCKER_KEYS:
        if not text.isascii():
            text = clean_text(text, source)
        fd = obj.get("stream")
        rec_meta = dict(meta) if meta else {}
        if type(fd) is str and fd in _FD:
            rec_meta["fd"] = _FD[fd]
        key = stream_key(rec_meta, stream)
        return _docker_text(
            text, key, to_epoch(obj.get("time")), rec_meta, position, source, max_line
        )
    return decode_record(
        obj, stream=stream, position=position, meta=meta, source=source, max_line=max_line
    )


def _cri_records(
    cri: tuple[float, str, bool, str],
    stream: str,
    position: str | None,
    meta: Mapping[str, Any] | None,
    source: str,
    max_line: int,
) -> list[LogRecord]:
    t, fd, partial, content = cri
    if meta:
        rec_meta = dict(meta)
        rec_meta["fd"] = fd
        stream = stream_key(rec_meta, stream)
    else:
        rec_meta = {"fd": fd}
    if partial:
        if not content:
            return []
        rec_meta[PARTIAL] = True
    elif content[:1] == "{" and (lines := expand_vllm_json(content)) is not None:
        return _records(lines, stream, t, rec_meta, position, False, source, max_line)
    if len(content) > max_line:
        content = _truncate(content, max_line, source)
    return [LogRecord(stream, content, t, rec_meta, position)]


def _inner_envelope(
    text: str, fmt: Format | str, source: str
) -> tuple[float | None, str, bool, str, bool] | None | bool:
    """A record whose ``log`` is itself a CRI or Docker line (the collector did not parse):
    (time, fd, partial, text, docker_style); ``None`` if not; ``False`` if ``fmt`` demanded one
    and it is missing (already counted)."""
    first = text[:1]
    if fmt != Format.DOCKER and "0" <= first <= "9":
        cri = split_cri(text[:-1] if text.endswith("\n") else text)
        if cri is not None:
            return cri[0], cri[1], cri[2], cri[3], False
    elif fmt != Format.CRI and first == "{":
        obj = _json_dict(text)
        if obj is not None and type(obj.get("log")) is str and obj.keys() <= _DOCKER_KEYS:
            inner = obj["log"]
            if not inner.isascii():
                inner = clean_text(inner, source)
            return to_epoch(obj.get("time")), obj.get("stream"), False, inner, True
    if fmt == Format.CRI or fmt == Format.DOCKER:
        ratelog.reject(source, "bad_cri" if fmt == Format.CRI else "bad_docker", text)
        return False
    return None


def _docker_text(
    text: str,
    key: str,
    t: float | None,
    meta: dict[str, Any],
    position: str | None,
    source: str,
    max_line: int,
) -> list[LogRecord]:
    """Docker ``log`` value: a trailing ``\\n`` ends the line, its absence marks a 16 KiB chunk."""
    if text.endswith("\n"):
        text = text[:-1]
        partial = False
    elif not text:
        return []
    else:
        partial = True
    return _records(text, key, t, meta, position, partial, source, max_line)


def _records(
    text: str,
    key: str,
    t: float | None,
    meta: dict[str, Any],
    position: str | None,
    partial: bool,
    source: str,
    max_line: int,
) -> list[LogRecord]:
    """One record per physical line of ``text``; only the last may be partial. A complete
    line that is a vLLM JSON log record becomes the lines vLLM's text format prints."""
    if not partial and text[:1] == "{" and (lines := expand_vllm_json(text)) is not None:
        text = lines
    if "\n" not in text:
        if partial:
            meta[PARTIAL] = True
        if len(text) > max_line:
            text = _truncate(text, max_line, source)
        return [LogRecord(key, text, t, meta, position)]
    pieces = text.split("\n")
    out = []
    last = len(pieces) - 1
    for i, piece in enumerate(pieces):
        if len(piece) > max_line:
            piece = _truncate(piece, max_line, source)
        pos = position if i == 0 or position is None else f"{position}#{i}"
        if i == last:
            if partial:
                if not piece:
                    break
                meta[PARTIAL] = True
            out.append(LogRecord(key, piece, t, meta, pos))
        else:
            out.append(LogRecord(key, piece, t, dict(meta), pos))
    return out


def _truncate(text: str, max_line: int, source: str) -> str:
    ratelog.reject(source, "oversize", f"{len(text)} chars")
    return text[:max_line]
