"""The container runtimes' line envelopes: CRI (containerd, CRI-O) and Docker json-file.

* CRI: ``<RFC3339Nano> <stdout|stderr> <P|F>[:tags] <content>``; ``P`` is a chunk of a
  longer line (an empty one is dropped), ``F`` ends it.
* Docker: ``{"log": "...\\n", "stream": "stderr", "time": "..."}`` with only Docker's keys
  (and ``attrs``); a ``log`` without its trailing ``\\n`` is a 16 KiB chunk.

Chunks come out marked ``meta[PARTIAL]`` (see :mod:`service.ingest.lines`). Which envelope
a unit is in, and what to do when it is in none, is :mod:`service.ingest.envelope`'s call.
"""

from __future__ import annotations

from collections.abc import Mapping

from service.ingest.json_text import expand_vllm_json
from service.ingest.lines import PARTIAL, line_records
from service.ingest.salvage import clean_text, truncate
from service.ingest.timestamps import parse_rfc3339
from service.records import LogRecord, Meta, Position

DOCKER_KEYS = frozenset(("log", "stream", "time", "attrs"))

# (time, fd, partial, content) of one CRI line
CriLine = tuple[float, str, bool, str]


def split_cri(line: str) -> CriLine | None:
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


def docker_log(obj: Mapping[str, object], source: str) -> str | None:
    """The ``log`` of a Docker json-file entry (an object with only Docker's keys and a text
    ``log``), lone surrogates repaired; None when ``obj`` is not one."""
    text = obj.get("log")
    if type(text) is not str or not obj.keys() <= DOCKER_KEYS:
        return None
    return text if text.isascii() else clean_text(text, source)


def cri_records(
    cri: CriLine,
    key: str,
    position: Position | None,
    meta: Meta,
    source: str,
    max_line: int,
) -> list[LogRecord]:
    """The record of one CRI line (``meta`` gets its fd); none for an empty ``P`` chunk."""
    t, fd, partial, content = cri
    meta["fd"] = fd
    if partial:
        if not content:
            return []
        meta[PARTIAL] = True
    elif content[:1] == "{" and (lines := expand_vllm_json(content)) is not None:
        return line_records(lines, key, t, meta, position, False, source, max_line)
    if len(content) > max_line:
        content = truncate(content, max_line, source)
    return [LogRecord(key, content, t, meta, position)]


def docker_records(
    text: str,
    key: str,
    t: float | None,
    meta: Meta,
    position: Position | None,
    source: str,
    max_line: int,
) -> list[LogRecord]:
    """A Docker ``log`` value: a trailing ``\\n`` ends the line, its absence marks a chunk."""
    if text.endswith("\n"):
        text = text[:-1]
        partial = False
    elif not text:
        return []
    else:
        partial = True
    return line_records(text, key, t, meta, position, partial, source, max_line)
