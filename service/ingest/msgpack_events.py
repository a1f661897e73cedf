"""Fluent event shapes in msgpack: unpacker settings and ``(time, record)`` extraction.

Fluent Bit chunks (Forward entries, the http output's ``msgpack`` body) hold events as
``[time, record]`` or, with event format v2 (Fluent Bit >= 2.1), ``[[time, metadata],
record]``; Kafka ``msgpack`` values and some bodies are bare record maps.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import msgpack

from service.ingest.timestamps import ext_hook

MAX_ENTRIES = 1 << 20  # array/map headers larger than this are rejected before allocation
# what one :func:`unpack_all` call may build: maps and arrays, and the entries in them (an
# empty map is 1 byte packed and about 64 parsed; 100,000 Fluent Bit records with their
# Kubernetes metadata hold about 600,000 and 3,000,000)
MAX_CONTAINERS = 1_000_000
MAX_CONTAINER_ENTRIES = 8_000_000


class TooComplex(ValueError):
    """The data holds more maps and arrays (or entries in them) than one call may build."""


class BuildCounter:
    """Maps and arrays (and their entries) an unpacker has built; its hooks raise
    :class:`TooComplex` past :data:`MAX_CONTAINERS` / :data:`MAX_CONTAINER_ENTRIES`."""

    __slots__ = ("containers", "entries")

    def __init__(self) -> None:
        self.containers = 0
        self.entries = 0

    def reset(self) -> None:
        """Start counting the next message."""
        self.containers = self.entries = 0

    def count(self, obj: Any) -> Any:
        self.containers += 1
        self.entries += len(obj)
        if self.containers > MAX_CONTAINERS or self.entries > MAX_CONTAINER_ENTRIES:
            raise TooComplex(
                f"more than {MAX_CONTAINERS} maps and arrays or "
                f"{MAX_CONTAINER_ENTRIES} entries in them"
            )
        return obj


def new_unpacker(max_bytes: int, built: BuildCounter | None = None) -> msgpack.Unpacker:
    """Streaming unpacker for untrusted input: bounded buffer and container sizes, str kept
    lossless (undecodable bytes as surrogates), EventTime decoded to epoch floats; ``built``
    (if given) counts the maps and arrays it builds."""
    count = None if built is None else built.count
    return msgpack.Unpacker(
        object_hook=count,
        list_hook=count,
        raw=False,
        unicode_errors="surrogateescape",
        strict_map_key=False,
        ext_hook=ext_hook,
        max_buffer_size=max_bytes,
        max_array_len=min(max_bytes, MAX_ENTRIES),
        max_map_len=min(max_bytes, MAX_ENTRIES),
    )


def unpack_all(data: bytes | bytearray) -> Iterator[Any]:
    """Every object of a concatenated msgpack stream; raises on malformed or truncated data
    (``ValueError`` for a truncated tail), :class:`TooComplex` past :data:`MAX_CONTAINERS`
    maps and arrays or :data:`MAX_CONTAINER_ENTRIES` entries in them, counted as each is built."""
    built = BuildCounter()
    unpacker = new_unpacker(max(len(data), 1), built)
    unpacker.feed(data)
    end = 0
    for obj in unpacker:
        end = unpacker.tell()
        yield obj
    if end != len(data):
        raise ValueError(f"truncated msgpack: {len(data) - end} bytes left")


def split_event(obj: Any) -> tuple[Any, Mapping[str, Any]] | None:
    """``(time, record)`` of ``[time, record]``, ``[[time, meta], record]`` or a bare record
    (time ``None``); ``None`` for any other shape."""
    if type(obj) is dict:
        return None, obj
    if type(obj) is list and len(obj) == 2 and type(obj[1]) is dict:
        t = obj[0]
        if type(t) is list:
            t = t[0] if t else None
        return t, obj[1]
    return None


def to_bytes(value: Any) -> bytes | None:
    """A msgpack bin, or a str unpacked with ``surrogateescape``, back to its exact bytes."""
    if type(value) is bytes:
        return value
    if type(value) is str:
        return value.encode("utf-8", "surrogateescape")
    return None
