"""One JSON value held in a text (a Fluent record on a line, a Kafka value, an OTLP body),
and vLLM's JSON log records printed back as the lines its text formatter writes.

:func:`parse_json` uses orjson (about three times faster than the stdlib's C scanner on
Fluent records) and falls back to the scanner, which also accepts what orjson refuses (an
escaped lone surrogate; :func:`service.ingest.salvage.clean_text` repairs it later).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from json import JSONDecoder
from typing import Any

from service.ingest.vllm_json import is_vllm_json, vllm_json_lines

# the C scanner a JSONDecoder builds for itself: json.loads minus its Python wrapper
_SCAN_JSON: Callable[[str, int], tuple[Any, int]] = vars(JSONDecoder())["scan_once"]
_ORJSON: Callable[[str], Any] | None
try:  # optional speed-up (pyproject dependency); the stdlib scanner is the fallback
    from orjson import loads as _ORJSON
except ImportError:  # pragma: no cover
    _ORJSON = None


def parse_json(text: str) -> Any:
    """The single JSON value ``text`` holds; raise ``ValueError`` (or ``RecursionError``)
    if it holds anything else."""
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


def json_object(text: str) -> Mapping[str, Any] | None:
    """The JSON object ``text`` holds, else None (not JSON, or another kind of value)."""
    try:
        obj = parse_json(text)
    except (ValueError, RecursionError):
        return None
    return obj if type(obj) is dict else None


def expand_vllm_json(text: str) -> str | None:
    """The lines (``\\n``-joined) vLLM's text formatter prints for ``text`` when it is one
    of vLLM's JSON log records (see :mod:`service.ingest.vllm_json`), else None."""
    if text[:1] != "{" or '"levelname"' not in text:
        return None
    obj = json_object(text)
    if obj is None or not is_vllm_json(obj):
        return None
    return "\n".join(vllm_json_lines(obj))
