"""vLLM's JSON log records, turned back into the lines vLLM's text formatter prints.

vLLM 0.32 writes JSON logs with ``--logging-config.formatter json`` (or a ``dictConfig`` in
``VLLM_LOGGING_CONFIG_PATH`` using python-json-logger): one object per record,

    {"asctime": "2026-12-03 12:14:43,802", "levelname": "ERROR",
     "name": "vllm.v1.engine.core", "processName": "EngineCore", "process": 8466,
     "message": "EngineCore failed to start.", "exc_info": "Traceback ...",
     "vllm_process_name": "EngineCore"}

(``asctime levelname name processName process message`` from vLLM's ``JSON_FORMAT``; the
record's extra attribute ``vllm_process_name`` and, for a logged exception, ``exc_info`` /
``stack_info`` added by python-json-logger). The text formatter of the same run prints

    (EngineCore pid=8466) ERROR 12-03 12:14:43 [core.py:1491] EngineCore failed to start.

and repeats that header on every line of a multi-line message and of its traceback. The
classifier reads that header (process, level, file → stage evidence), so a JSON record is
rebuilt into exactly those lines: the process name and pid, the level, the time as
``MM-DD HH:MM:SS``, the file from the logger's module name (``vllm.v1.engine.core`` →
``core.py``; the JSON format carries no line number, ``:0`` stands in; a custom format's
``filename`` / ``lineno`` are used when present), then one line per line of the message,
``exc_info`` and ``stack_info``. uvicorn's records (``uvicorn.error``, ``uvicorn.access``, also
JSON under ``--logging-config.formatter json``) are printed by uvicorn's own formatter in the
text format, ``INFO:     Application startup complete.``, and are rebuilt that way.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_LEVELS = frozenset(("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"))
_ASCTIME = re.compile(r"(?:\d{4}-)?(\d\d)-(\d\d)[T ](\d\d:\d\d:\d\d)")
_NO_TIME = "00-00 00:00:00"  # parses as a vLLM header; no line time is read from it


def is_vllm_json(obj: Mapping[str, Any]) -> bool:
    """Whether a decoded JSON object is a vLLM (python-json-logger) log record: a string
    ``levelname`` and ``message`` plus the logger's ``name`` or the process fields."""
    return (
        type(obj.get("levelname")) is str
        and type(obj.get("message")) is str
        and ("vllm_process_name" in obj or "processName" in obj or "name" in obj)
    )


def vllm_json_lines(obj: Mapping[str, Any]) -> list[str]:
    """The text lines vLLM's own formatter prints for the record ``obj``."""
    name = obj.get("name")
    header = (
        _uvicorn_header(obj) if type(name) is str and name.startswith("uvicorn") else _header(obj)
    )
    text = obj.get("message") or ""
    for key in ("exc_info", "stack_info"):
        extra = obj.get(key)
        if type(extra) is str and extra:
            text = f"{text}\n{extra}" if text else extra
    text = text.rstrip("\n")
    if "\n" not in text:
        return [header + text]
    return [header + piece.rstrip("\r") for piece in text.split("\n")]


def _level(obj: Mapping[str, Any]) -> str:
    level = str(obj.get("levelname") or "INFO").upper()
    if level == "WARN":
        return "WARNING"
    return level if level in _LEVELS else "INFO"


def _uvicorn_header(obj: Mapping[str, Any]) -> str:
    """uvicorn's ``%(levelprefix)s %(message)s``: ``INFO:`` padded to nine characters."""
    level = _level(obj)
    return f"{level}:{' ' * (8 - len(level))} "


def _header(obj: Mapping[str, Any]) -> str:
    proc = obj.get("vllm_process_name") or obj.get("processName")
    pid = obj.get("process")
    prefix = ""
    if type(proc) is str and proc and (type(pid) is int or (type(pid) is str and pid.isdigit())):
        prefix = f"({proc} pid={pid}) "
    level = _level(obj)
    asctime = obj.get("asctime")
    m = _ASCTIME.match(asctime) if type(asctime) is str else None
    when = f"{m.group(1)}-{m.group(2)} {m.group(3)}" if m else _NO_TIME
    return f"{prefix}{level} {when} [{_fileinfo(obj)}] "


def _fileinfo(obj: Mapping[str, Any]) -> str:
    lineno = obj.get("lineno")
    lineno = lineno if type(lineno) is int and lineno >= 0 else 0
    fname = obj.get("filename")
    if type(fname) is str and fname and not any(c in fname for c in " ]:"):
        return f"{fname}:{lineno}"
    name = obj.get("name")
    module = name.rsplit(".", 1)[-1] if type(name) is str and name else ""
    if not module or any(c in module for c in " ]:/"):
        module = "unknown"
    return f"{module}.py:{lineno}"
