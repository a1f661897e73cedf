"""Forward Protocol v1 messages to records: what one connection's bytes decode into.

Accepts all four modes — Message ``[tag, time, record, option?]``, Forward ``[tag,
[[time, record], ...], option?]``, PackedForward ``[tag, bin|str, option?]`` and
CompressedPackedForward (gzip, ``option.compressed == "gzip"``) — with integer or EventTime
times (and Fluent Bit's ``[[time, metadata], record]`` entries), ``nil`` heartbeats and the
``option`` map: ``chunk`` is returned to be acked (``{"ack": chunk}``) once the batch is
stored, ``fluent_signal`` other than 0 (metrics, traces) is acknowledged and dropped, ``size``
is informational.

Every complete message buffered is decoded into one :class:`Batch`; with ``chunk_ids`` a
message carrying a ``chunk`` is its own batch, with the chunk id ``forward:<chunk>``
(:func:`chunk_key`), so that a resent chunk can be recognised. Bad input is counted
(``sentinel_rejects_total``) and never raises out of the decoder: a malformed msgpack stream
ends the batches with ``healthy`` False (the stream cannot be resynchronised), an over-size
frame or a spent memory budget raises :class:`DropConnection`, a well-formed message of an
unknown shape is skipped, a message with a tag over
:data:`~service.ingest.bounds.MAX_TAG` characters or more than ``max_records`` entries
is dropped and acked (resending it would not help). Gzip entries are inflated under the
process-wide budget of :mod:`service.ingest.budget`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, NamedTuple

import msgpack

from service.ingest.bounds import MAX_RECORDS, MAX_TAG
from service.ingest.budget import BudgetExhausted, Lease, gunzip_bounded
from service.ingest.compression import GZIP_MAGIC, DecompressedTooLarge
from service.ingest.envelope import MAX_LINE, decode_record
from service.ingest.msgpack_events import BuildCounter, split_event, to_bytes, unpack_all
from service.ratelog import brief, reject
from service.records import LogRecord


def chunk_key(chunk: Any) -> str:
    """The store's id of a Forward chunk (``forward:`` + the client's chunk id)."""
    if isinstance(chunk, bytes | bytearray):
        return "forward:" + bytes(chunk).hex()
    return f"forward:{chunk}"


class DropConnection(Exception):
    """The byte stream can no longer be trusted, or must not be read on (already counted)."""


class Frames:
    """Per-connection byte accounting: fed in total, consumed up to the end of the last
    complete message, and the unfinished remainder charged to the server's budget."""

    __slots__ = ("built", "fed", "boundary", "pending")

    def __init__(self, built: BuildCounter | None = None) -> None:
        self.fed = 0
        self.boundary = 0
        self.pending = 0
        self.built = built  # what the unpacker built of the message being read


class Batch(NamedTuple):
    """Records for the sink, the chunks to ack once it stored them, and the chunk id."""

    records: list[LogRecord]
    acks: list[Any]
    chunk_id: str | None


class ForwardDecoder:
    """Decodes the messages buffered in a connection's unpacker (no state of its own)."""

    def __init__(
        self,
        source: str = "forward",
        *,
        max_message_bytes: int = 32 << 20,
        max_decompressed_bytes: int | None = None,
        max_records: int = MAX_RECORDS,
        max_line: int = MAX_LINE,
        chunk_ids: bool = False,
    ) -> None:
        self.source = source
        self.max_message_bytes = max_message_bytes
        self.max_decompressed_bytes = max_decompressed_bytes or 4 * max_message_bytes
        self.max_records = max_records
        self.max_line = max_line
        self.chunk_ids = chunk_ids
        self.gate = asyncio.Semaphore(1)  # one large decoding at a time (connection.py)

    def feed(self, unpacker: msgpack.Unpacker, data: bytes) -> None:
        """Buffer ``data``; an unfinished frame over ``max_message_bytes`` drops the connection."""
        try:
            unpacker.feed(data)
        except msgpack.BufferFull:
            reject(self.source, "oversize", f"frame over {self.max_message_bytes} bytes")
            raise DropConnection from None

    def messages(self, unpacker: Any, frames: Frames | None) -> Any:
        """The complete messages buffered; notes where the last one ended."""
        for message in unpacker:
            if frames is not None:
                frames.boundary = unpacker.tell()
                if frames.built is not None:
                    frames.built.reset()
            yield message

    def drain(
        self, unpacker: Any, frames: Frames | None = None
    ) -> tuple[list[LogRecord], list[Any], bool]:
        """Decode every complete message buffered: (records, chunk ids to ack, stream ok)."""
        records: list[LogRecord] = []
        acks: list[Any] = []
        try:
            for message in self.messages(unpacker, frames):
                chunk = self.message(message, records)
                if chunk is not None:
                    acks.append(chunk)
        except DropConnection:
            raise
        except Exception as exc:  # malformed msgpack: the rest of the stream is unusable
            reject(self.source, "bad_msgpack", str(exc))
            return records, acks, False
        return records, acks, True

    def batches(self, unpacker: Any, frames: Frames | None = None) -> tuple[list[Batch], bool]:
        """Every complete message buffered as batches ``(records, chunks to ack, chunk id)``,
        and whether the stream is still usable: one batch, or with ``chunk_ids`` one per
        chunk-carrying message (its own records only) and one per run of the others."""
        if not self.chunk_ids:
            records, acks, healthy = self.drain(unpacker, frames)
            return ([Batch(records, acks, None)] if records or acks else []), healthy
        batches: list[Batch] = []
        records = []
        healthy = True
        try:
            for message in self.messages(unpacker, frames):
                mine: list[LogRecord] = []
                chunk = self.message(message, mine)
                if chunk is None:
                    records += mine
                    continue
                if records:  # what came before it is not part of the chunk
                    batches.append(Batch(records, [], None))
                    records = []
                batches.append(Batch(mine, [chunk], chunk_key(chunk)))
        except DropConnection:
            raise
        except Exception as exc:  # malformed msgpack: the rest of the stream is unusable
            reject(self.source, "bad_msgpack", str(exc))
            healthy = False
        if records:
            batches.append(Batch(records, [], None))
        return batches, healthy

    def message(self, message: Any, out: list[LogRecord]) -> Any:
        """Decode one Forward message into ``out``; return its ``chunk`` option (or None)."""
        if message is None:
            return None  # heartbeat
        if type(message) is not list or len(message) < 2:
            reject(self.source, "bad_message", brief(message))
            return None
        tag, second = message[0], message[1]
        if type(tag) is not str:
            if type(tag) is not bytes:
                reject(self.source, "bad_message", brief(message))
                return None
            tag = tag.decode("utf-8", "replace")  # a client that packs the tag as bin
        kind = type(second)
        if kind is list or kind is bytes or kind is str:
            option = message[2] if len(message) > 2 else None
        elif len(message) >= 3:
            option = message[3] if len(message) > 3 else None
        else:
            reject(self.source, "bad_message", brief(message))
            return None
        if type(option) is not dict:
            option = None
        chunk = option.get("chunk") if option else None
        if len(tag) > MAX_TAG:
            reject(self.source, "tag_too_long", f"tag of {len(tag)} characters: {tag}")
            return chunk
        signal = option.get("fluent_signal", 0) if option else 0
        if signal not in (0, None):
            reject(self.source, "not_logs", f"fluent_signal={signal!r} tag={tag}")
            return chunk
        if kind is list:
            entries = second
        elif kind is bytes or kind is str:
            entries = self._packed(second, option)
        else:
            entries = [[second, message[2]]]
        if len(entries) > self.max_records:
            reject(
                self.source,
                "too_many_records",
                f"message of {len(entries)} entries (at most {self.max_records})",
            )
            return chunk
        self._entries(tag, entries, out)
        return chunk

    def _packed(self, blob: str | bytes, option: Mapping[str, Any] | None) -> list[Any]:
        data: bytes | bytearray = to_bytes(blob) or b""
        compressed = type(option) is dict and option.get("compressed") == "gzip"
        with Lease(self.max_decompressed_bytes) as lease:
            if compressed or data.startswith(GZIP_MAGIC):
                try:
                    data = gunzip_bounded(data, lease)
                except DecompressedTooLarge as exc:
                    reject(self.source, "decompressed_too_large", str(exc))
                    return []
                except BudgetExhausted as exc:  # busy, not bad: no ack, the client resends
                    reject(self.source, "memory_budget", str(exc))
                    raise DropConnection from None
                except ValueError as exc:
                    reject(self.source, "bad_gzip", str(exc))
                    return []
            entries: list[Any] = []
            try:
                for entry in unpack_all(data):
                    entries.append(entry)
                    if len(entries) > self.max_records:
                        break  # refused by the caller
            except Exception as exc:
                reject(self.source, "bad_msgpack", f"packed entries: {exc}")
            del data
        return entries

    def _entries(self, tag: str, entries: list[Any], out: list[LogRecord]) -> None:
        source = self.source
        max_line = self.max_line
        for entry in entries:
            event = split_event(entry)
            if event is None:
                reject(source, "bad_entry", brief(entry))
                continue
            t, record = event
            out.extend(
                decode_record(record, tag=tag, time=t, stream=tag, source=source, max_line=max_line)
            )
