"""Forward Protocol v1 server: real fluent-logger client, hand-built frames of every mode,
ack-after-store, the shared-key handshake, TLS and hostile input."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import hashlib
import os
import shutil
import ssl
import subprocess
from collections.abc import Awaitable, Callable
from typing import Any

import msgpack
import pytest
from fluent.sender import EventTime as ClientEventTime
from fluent.sender import FluentSender
from hypothesis import given, settings
from hypothesis import strategies as st

from service.ingest.msgpack_events import new_unpacker
from service.records import LogRecord
from service.sources.forward.messages import DropConnection
from service.sources.forward.server import ForwardServer, tls_context
from tests.ingest_samples import (
    CONTAINER_ID,
    ENGINE_FAILED,
    KV_CACHE,
    NCCL_WARN,
    ROUTES,
    STARTUP,
    STREAM,
    TAG,
    fluent_bit_record,
    lines_in,
    rejects,
)

T0 = 1785147072
HOST = "sentinel-test"


def event_time(seconds: int, nanos: int) -> msgpack.ExtType:
    return msgpack.ExtType(0, seconds.to_bytes(4, "big") + nanos.to_bytes(4, "big"))


def record(log: str, **extra: Any) -> dict[str, Any]:
    rec = fluent_bit_record(log=log, **extra)
    del rec["time"]  # let the Forward event time carry the time
    return rec


def sha512_hex(*parts: bytes) -> str:
    return hashlib.sha512(b"".join(parts)).hexdigest()


class Sink:
    """Collects batches; optionally waits for a gate or fails, like a real store might."""

    def __init__(self) -> None:
        self.batches: list[list[LogRecord]] = []
        self.gate: asyncio.Event | None = None
        self.fail = False

    @property
    def records(self) -> list[LogRecord]:
        return [r for batch in self.batches for r in batch]

    async def __call__(self, records: list[LogRecord]) -> None:
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise OSError("disk full")
        self.batches.append(records)


class Client:
    """A bare Forward client speaking msgpack over one connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.unpacker = msgpack.Unpacker(raw=False)

    @classmethod
    async def connect(cls, server: ForwardServer, tls: ssl.SSLContext | None = None) -> Client:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port, ssl=tls)
        return cls(reader, writer)

    async def send(self, obj: Any, *, use_bin_type: bool = True) -> None:
        self.writer.write(msgpack.packb(obj, use_bin_type=use_bin_type))
        await self.writer.drain()

    async def send_raw(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def receive(self, timeout: float = 3.0) -> Any:
        while True:
            for obj in self.unpacker:
                return obj
            data = await asyncio.wait_for(self.reader.read(65536), timeout)
            if not data:
                raise EOFError("server closed the connection")
            self.unpacker.feed(data)

    async def closed_by_server(self, timeout: float = 3.0) -> bool:
        try:
            return await asyncio.wait_for(self.reader.read(65536), timeout) == b""
        except ConnectionError:
            return True

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


async def until(check: Callable[[], bool], timeout: float = 3.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.01)


def serve(test: Callable[[ForwardServer, Sink], Awaitable[Any]], **options: Any) -> Any:
    async def main() -> Any:
        sink = Sink()
        server = ForwardServer(sink, port=0, self_hostname=HOST, **options)
        await server.start()
        try:
            return await test(server, sink)
        finally:
            await server.stop()

    return asyncio.run(main())


# --- real client ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nanosecond_precision", "sent", "expected"),
    [(False, T0, float(T0)), (True, T0 + 0.123456, T0 + 0.123456)],
)
def test_fluent_logger_client(nanosecond_precision, sent, expected):
    async def test(server: ForwardServer, sink: Sink) -> None:
        def emit() -> None:
            sender = FluentSender(
                TAG, host="127.0.0.1", port=server.port, nanosecond_precision=nanosecond_precision
            )
            try:
                assert sender.emit_with_time(None, sent, record(ENGINE_FAILED)), sender.last_error
                assert sender.emit_with_time(None, sent, record(KV_CACHE + "\n", stream="stdout"))
            finally:
                sender.close()

        await asyncio.to_thread(emit)
        await until(lambda: len(sink.records) == 2)
        first, second = sink.records
        assert (first.stream, first.text) == (STREAM, ENGINE_FAILED)
        assert first.time == pytest.approx(expected, abs=1e-6)
        assert first.meta["tag"] == TAG and first.meta["fd"] == "stderr"
        assert first.meta["container_id"] == CONTAINER_ID
        assert (second.text, second.meta["fd"]) == (KV_CACHE, "stdout")

    serve(test)


def test_fluent_logger_event_time_is_msgpack_ext_type_0():
    # Guards the test above: with nanosecond_precision the client really sends ext type 0.
    packed = msgpack.packb(ClientEventTime(T0 + 0.5))
    assert packed[:2] == b"\xd7\x00"  # fixext 8, type 0


# --- modes ---------------------------------------------------------------------------------


def test_forward_mode_with_chunk_is_acked_after_the_batch_is_stored():
    async def test(server: ForwardServer, sink: Sink) -> None:
        client = await Client.connect(server)
        entries = [[event_time(T0, 1), record(ROUTES)], [T0 + 1, record(STARTUP)]]
        await client.send([TAG, entries, {"chunk": "p8n9gmxTQVC8/nh2wlKKeQ==", "size": 2}])
        assert await client.receive() == {"ack": "p8n9gmxTQVC8/nh2wlKKeQ=="}
        assert [r.text for r in sink.records] == [ROUTES, STARTUP]
        assert sink.records[0].time == pytest.approx(T0 + 1e-9)
        assert sink.records[1].time == T0 + 1
        await client.close()

    serve(test)


def test_no_ack_before_the_sink_returns():
    async def test(server: ForwardServer, sink: Sink) -> None:
        sink.gate = asyncio.Event()
        client = await Client.connect(server)
        await client.send([TAG, T0, record(ROUTES), {"chunk": "c1"}])  # Message mode + option
        with pytest.raises(TimeoutError):
            await client.receive(timeout=0.3)
        assert sink.records == []
        sink.gate.set()
        assert await client.receive() == {"ack": "c1"}
        assert [r.text for r in sink.records] == [ROUTES]
        await client.close()

    serve(test)


def test_chunks_of_a_batch_the_sink_refused_are_not_joined_twice():
    async def test(server: ForwardServer, sink: Sink) -> None:
        chunk = {"time": "2026-07-27T10:11:12.1Z", "stream": "stdout"}
        first = await Client.connect(server)
        await first.send([TAG, [[T0, {**chunk, "_p": "P", "log": "part1-"}]], {"chunk": "1"}])
        assert await first.receive() == {"ack": "1"}
        second = [
            TAG,
            [[T0, {**chunk, "_p": "P", "log": "part2-"}], [T0, {**chunk, "_p": "F", "log": "end"}]],
            {"chunk": "2"},
        ]
        sink.fail = True
        await first.send(second)
        assert await first.closed_by_server()
        sink.fail = False
        retry = await Client.connect(server)
        await retry.send(second)
        assert await retry.receive() == {"ack": "2"}
        assert [r.text for r in sink.records] == ["part1-part2-end"]
        await retry.close()

    serve(test)


def test_failed_sink_means_no_ack_and_a_closed_connection():
    async def test(server: ForwardServer, sink: Sink) -> None:
        sink.fail = True
        client = await Client.connect(server)
        await client.send([TAG, [[T0, record(ROUTES)]], {"chunk": "c2"}])
        assert await client.closed_by_server()
        sink.fail = False
        retry = await Client.connect(server)  # the client retries the same chunk
        await retry.send([TAG, [[T0, record(ROUTES)]], {"chunk": "c2"}])
        assert await retry.receive() == {"ack": "c2"}
        await retry.close()

    serve(test)


@pytest.mark.parametrize("blob_type", ["bin", "str"])
def test_packed_forward(blob_type):
    async def test(server: ForwardServer, sink: Sink) -> None:
        blob = b"".join(
            msgpack.packb([event_time(T0, 500_000_000 + i), record(line)])
            for i, line in enumerate([ROUTES, NCCL_WARN, ENGINE_FAILED])
        )
        client = await Client.connect(server)
        # str blobs hold arbitrary bytes (EventTime payloads are not UTF-8): packed as raw str
        await client.send([TAG, blob, {"size": 3, "chunk": "pf"}], use_bin_type=blob_type == "bin")
        assert await client.receive() == {"ack": "pf"}
        assert [r.text for r in sink.records] == [ROUTES, NCCL_WARN, ENGINE_FAILED]
        assert sink.records[2].time == pytest.approx(T0 + 0.500000002)
        await client.close()

    serve(test)


def test_compressed_packed_forward_with_several_gzip_members():
    async def test(server: ForwardServer, sink: Sink) -> None:
        first = msgpack.packb([T0, record(ROUTES)]) + msgpack.packb([T0, record(STARTUP)])
        second = msgpack.packb([[event_time(T0, 7), {}], record(KV_CACHE)])  # Fluent Bit v2 entry
        blob = gzip.compress(first) + gzip.compress(second)
        client = await Client.connect(server)
        await client.send([TAG, blob, {"compressed": "gzip", "size": 3, "chunk": "z"}])
        assert await client.receive() == {"ack": "z"}
        assert [r.text for r in sink.records] == [ROUTES, STARTUP, KV_CACHE]
        assert sink.records[2].time == pytest.approx(T0 + 7e-9)
        await client.close()

    serve(test)


def test_corrupt_gzip_is_counted_and_still_acked():
    async def test(server: ForwardServer, sink: Sink) -> None:
        before = rejects("forward", "bad_gzip")
        client = await Client.connect(server)
        blob = gzip.compress(msgpack.packb([T0, record(ROUTES)]))[:-8]
        await client.send([TAG, blob, {"compressed": "gzip", "chunk": "bad"}])
        assert await client.receive() == {"ack": "bad"}  # retrying would not fix it
        assert sink.records == [] and rejects("forward", "bad_gzip") == before + 1
        await client.close()

    serve(test)


def test_heartbeat_and_non_log_signals():
    async def test(server: ForwardServer, sink: Sink) -> None:
        before = rejects("forward", "not_logs")
        client = await Client.connect(server)
        await client.send(None)
        await client.send([TAG, [[T0, {"cpu": 1.0}]], {"fluent_signal": 1, "chunk": "m"}])
        assert await client.receive() == {"ack": "m"}
        await client.send([TAG, [[T0, record(ROUTES)]], {"fluent_signal": 0, "chunk": "l"}])
        assert await client.receive() == {"ack": "l"}
        assert [r.text for r in sink.records] == [ROUTES]
        assert rejects("forward", "not_logs") == before + 1
        await client.close()

    serve(test)


def test_unknown_shapes_are_skipped_and_the_connection_goes_on():
    async def test(server: ForwardServer, sink: Sink) -> None:
        bad_message, bad_entry = rejects("forward", "bad_message"), rejects("forward", "bad_entry")
        client = await Client.connect(server)
        await client.send([TAG, 42])  # too short for Message mode
        await client.send({"not": "an array"})
        await client.send([TAG, [[T0, "not a record"], [T0, record(ROUTES)], "junk"]])
        await client.send([TAG.encode(), T0, record(STARTUP), {"chunk": "after"}])  # bin tag
        assert await client.receive() == {"ack": "after"}
        assert [r.text for r in sink.records] == [ROUTES, STARTUP]
        assert sink.records[1].meta["tag"] == TAG
        assert rejects("forward", "bad_message") == bad_message + 2
        assert rejects("forward", "bad_entry") == bad_entry + 2
        await client.close()

    serve(test)


def test_cri_chunks_are_joined_across_messages_and_flushed_on_stop():
    async def main() -> list[LogRecord]:
        sink = Sink()
        server = ForwardServer(sink, port=0)
        await server.start()
        client = await Client.connect(server)
        chunk = {"time": "2026-07-27T10:11:12.1Z", "stream": "stdout", "_p": "P"}
        await client.send([TAG, T0, {**chunk, "log": "a" * 100}])
        await client.send([TAG, T0, {**chunk, "log": "b" * 100, "_p": "F"}])
        await client.send([TAG, T0, {**chunk, "log": "never finished"}, {"chunk": "x"}])
        assert await client.receive() == {"ack": "x"}
        await client.close()
        assert [r.text for r in sink.records] == ["a" * 100 + "b" * 100]
        await server.stop()
        return sink.records

    records = asyncio.run(main())
    assert [r.text for r in records][-1] == "never finished"


def test_a_line_whose_closing_chunk_never_comes_is_flushed_after_the_timeout():
    async def test(server: ForwardServer, sink: Sink) -> None:
        client = await Client.connect(server)
        chunk = {"time": "2026-07-27T10:11:12.1Z", "stream": "stderr", "_p": "P"}
        await client.send([TAG, T0, {**chunk, "log": "Fatal Python error: Segmentation"}])
        await until(lambda: len(sink.records) == 1, timeout=2.0)
        assert sink.records[0].text == "Fatal Python error: Segmentation"
        await client.close()

    serve(test, partial_timeout=0.2)


def test_lines_in_counts_records_passed_to_the_sink():
    async def test(server: ForwardServer, sink: Sink) -> None:
        before = lines_in("forward")
        client = await Client.connect(server)
        await client.send([TAG, [[T0, record(f"{ROUTES}\n{STARTUP}\n")]], {"chunk": "n"}])
        assert await client.receive() == {"ack": "n"}
        assert lines_in("forward") == before + 2

    serve(test)


# --- hostile input -------------------------------------------------------------------------


def test_malformed_msgpack_drops_the_connection_not_the_server():
    async def test(server: ForwardServer, sink: Sink) -> None:
        before = rejects("forward", "bad_msgpack")
        client = await Client.connect(server)
        await client.send([TAG, T0, record(ROUTES), {"chunk": "ok"}])
        assert await client.receive() == {"ack": "ok"}
        await client.send_raw(b"\xc1\x92\xa3abc")  # 0xc1 is never used in msgpack
        assert await client.closed_by_server()
        assert rejects("forward", "bad_msgpack") == before + 1
        again = await Client.connect(server)
        await again.send([TAG, T0, record(STARTUP), {"chunk": "again"}])
        assert await again.receive() == {"ack": "again"}
        assert [r.text for r in sink.records] == [ROUTES, STARTUP]
        await again.close()

    serve(test)


def test_oversize_frame_drops_the_connection():
    async def test(server: ForwardServer, sink: Sink) -> None:
        before = rejects("forward", "oversize")
        client = await Client.connect(server)
        await client.send_raw(msgpack.packb([TAG, T0, record("x" * 20_000)]))
        assert await client.closed_by_server()
        assert rejects("forward", "oversize") == before + 1 and sink.records == []
        again = await Client.connect(server)
        await again.send([TAG, T0, record(ROUTES), {"chunk": "small"}])
        assert await again.receive() == {"ack": "small"}
        await again.close()

    serve(test, max_message_bytes=4096)


def test_huge_container_header_is_refused_before_allocation():
    async def test(server: ForwardServer, sink: Sink) -> None:
        client = await Client.connect(server)
        await client.send_raw(b"\xdd\xff\xff\xff\xff")  # array32 claiming 4 billion items
        assert await client.closed_by_server()

    serve(test)


def test_truncated_frame_then_disconnect_yields_nothing():
    async def test(server: ForwardServer, sink: Sink) -> None:
        client = await Client.connect(server)
        await client.send_raw(msgpack.packb([TAG, T0, record(ROUTES)])[:-5])
        await client.close()
        await asyncio.sleep(0.1)
        assert sink.records == []

    serve(test)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2000))
def test_any_bytes_fed_to_a_connection_never_raise(data):
    server = ForwardServer(Sink(), max_message_bytes=1024)
    unpacker = new_unpacker(server.decoder.max_message_bytes)
    try:
        server.decoder.feed(unpacker, data)
    except DropConnection:
        return
    records, acks, _healthy = server.decoder.drain(unpacker)
    for rec in records:
        rec.text.encode("utf-8")


msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=30)
    | st.binary(max_size=30)
    | st.builds(event_time, st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1)),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "log",
                    "message",
                    "time",
                    "stream",
                    "_p",
                    "kubernetes",
                    "chunk",
                    "compressed",
                    "fluent_signal",
                    "size",
                ]
            ),
            children,
            max_size=5,
        )
    ),
    max_leaves=25,
)


@settings(max_examples=500, deadline=None)
@given(st.lists(msgpack_values, max_size=4), st.sampled_from([TAG, "", "x"]))
def test_any_well_formed_message_never_raises(body, tag):
    server = ForwardServer(Sink())
    unpacker = new_unpacker(server.decoder.max_message_bytes)
    for message in ([tag, *body], body):
        server.decoder.feed(unpacker, msgpack.packb(message))
        records, _acks, healthy = server.decoder.drain(unpacker)
        assert healthy
        for rec in records:
            rec.text.encode("utf-8")


def test_junk_over_the_wire_leaves_the_server_serving():
    async def test(server: ForwardServer, sink: Sink) -> None:
        for _ in range(20):
            client = await Client.connect(server)
            await client.send_raw(os.urandom(3000))
            await client.close()
        client = await Client.connect(server)
        await client.send([TAG, T0, record(ROUTES), {"chunk": "alive"}])
        assert await client.receive() == {"ack": "alive"}
        await client.close()

    serve(test, max_message_bytes=1 << 16)


# --- shared-key handshake ------------------------------------------------------------------


async def handshake(
    client: Client,
    key: str,
    *,
    username: str = "",
    password: str = "",
    hostname: str = "fluent-bit-node-7",
) -> list[Any]:
    helo = await client.receive()
    assert helo[0] == "HELO"
    nonce = helo[1]["nonce"]
    auth_salt = helo[1]["auth"]
    salt = os.urandom(16)  # Fluent Bit packs its random salt as a str: arbitrary bytes
    digest = sha512_hex(salt, hostname.encode(), nonce, key.encode())
    password_digest = (
        sha512_hex(auth_salt, username.encode(), password.encode()) if auth_salt else ""
    )
    ping = [
        "PING",
        hostname.encode(),
        salt,
        digest.encode(),
        username.encode(),
        password_digest.encode(),
    ]
    await client.send(ping, use_bin_type=False)  # bytes go out as msgpack str, like Fluent Bit
    pong = await client.receive()
    if pong[1]:
        assert pong[3] == HOST
        assert pong[4] == sha512_hex(salt, HOST.encode(), nonce, key.encode())
    return pong


def test_shared_key_handshake_then_data():
    async def test(server: ForwardServer, sink: Sink) -> None:
        client = await Client.connect(server)
        helo = await client.receive()
        assert helo[0] == "HELO" and len(helo[1]["nonce"]) == 16
        assert helo[1]["auth"] == b"" and helo[1]["keepalive"] is True
        client.unpacker.feed(msgpack.packb(helo))  # replay it for the helper
        pong = await handshake(client, "s3cr3t-shared")
        assert pong[:3] == ["PONG", True, ""]
        await client.send([TAG, [[T0, record(ROUTES)]], {"chunk": "after-auth"}])
        assert await client.receive() == {"ack": "after-auth"}
        assert [r.text for r in sink.records] == [ROUTES]
        await client.close()

    serve(test, shared_key="s3cr3t-shared")


def test_wrong_shared_key_is_refused():
    async def test(server: ForwardServer, sink: Sink) -> None:
        before = rejects("forward", "auth_failed")
        client = await Client.connect(server)
        pong = await handshake(client, "guessed")
        assert pong == ["PONG", False, "shared_key mismatch", "", ""]
        await client.send_raw(msgpack.packb([TAG, T0, record(ROUTES)]))
        assert await client.closed_by_server()
        assert sink.records == [] and rejects("forward", "auth_failed") == before + 1

    serve(test, shared_key="s3cr3t-shared")


def test_data_instead_of_ping_is_refused():
    async def test(server: ForwardServer, sink: Sink) -> None:
        client = await Client.connect(server)
        assert (await client.receive())[0] == "HELO"
        await client.send([TAG, T0, record(ROUTES)])
        assert await client.receive() == ["PONG", False, "invalid ping message", "", ""]
        assert await client.closed_by_server() and sink.records == []

    serve(test, shared_key="k")


def test_silent_client_is_dropped_after_the_handshake_timeout():
    async def test(server: ForwardServer, sink: Sink) -> None:
        before = rejects("forward", "auth_failed")
        client = await Client.connect(server)
        assert (await client.receive())[0] == "HELO"
        assert await client.closed_by_server()
        assert rejects("forward", "auth_failed") == before + 1

    serve(test, shared_key="k", handshake_timeout=0.2)


@pytest.mark.parametrize(("password", "ok"), [("fluent-pass", True), ("nope", False)])
def test_username_password_auth(password, ok):
    async def test(server: ForwardServer, sink: Sink) -> None:
        client = await Client.connect(server)
        pong = await handshake(client, "k", username="fluentbit", password=password)
        assert pong[1] is ok
        if not ok:
            assert pong[2] == "username/password mismatch"
            return
        await client.send([TAG, T0, record(ROUTES), {"chunk": "u"}])
        assert await client.receive() == {"ack": "u"}
        await client.close()

    serve(test, shared_key="k", users={"fluentbit": "fluent-pass"})


# --- TLS -----------------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
def test_tls_transport(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    client_tls = ssl.create_default_context(cafile=str(cert))

    async def test(server: ForwardServer, sink: Sink) -> None:
        client = await Client.connect(server, tls=client_tls)
        pong = await handshake(client, "tls-key")
        assert pong[1] is True
        await client.send([TAG, [[T0, record(ROUTES)]], {"chunk": "tls"}])
        assert await client.receive() == {"ack": "tls"}
        assert [r.text for r in sink.records] == [ROUTES]
        await client.close()

    serve(test, shared_key="tls-key", tls=tls_context(str(cert), str(key)))


def packed_message() -> bytes:
    blob = b"".join(
        msgpack.packb([event_time(T0, i), record(line)])
        for i, line in enumerate([ROUTES, STARTUP, KV_CACHE])
    )
    return msgpack.packb([TAG, gzip.compress(blob), {"compressed": "gzip", "chunk": "k"}])


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_a_frame_split_anywhere_decodes_once_complete(data):
    frame = packed_message()
    cut = data.draw(st.integers(1, len(frame) - 1))
    server = ForwardServer(Sink())
    unpacker = new_unpacker(server.decoder.max_message_bytes)
    server.decoder.feed(unpacker, frame[:cut])
    assert server.decoder.drain(unpacker) == ([], [], True)  # waits for the rest
    server.decoder.feed(unpacker, frame[cut:])
    records, acks, healthy = server.decoder.drain(unpacker)
    assert healthy and acks == ["k"]
    assert [r.text for r in records] == [ROUTES, STARTUP, KV_CACHE]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_junk_after_good_frames_is_counted_once_and_the_good_ones_kept(junk):
    server = ForwardServer(Sink())
    unpacker = new_unpacker(server.decoder.max_message_bytes)
    before = rejects("forward", "bad_msgpack")
    server.decoder.feed(unpacker, packed_message() + b"\xc1" + junk)  # 0xc1: never valid msgpack
    records, acks, healthy = server.decoder.drain(unpacker)
    assert not healthy and acks == ["k"] and len(records) == 3
    assert rejects("forward", "bad_msgpack") == before + 1


def test_chunk_ids_resent_chunk_is_acked_not_applied_and_neighbours_are_kept():
    """``chunk_ids=True`` (the service): each chunk-carrying message is its own batch with
    its chunk id; a sink that reports the chunk as stored before (False) gets the ack sent
    again, and messages around it in the same read are still delivered."""

    class ChunkSink:
        def __init__(self) -> None:
            self.seen: set[str] = set()
            self.calls: list[tuple[list[str], str | None]] = []

        async def __call__(self, records: list[LogRecord], chunk_id: str | None) -> bool:
            self.calls.append(([r.text for r in records], chunk_id))
            if chunk_id is not None:
                if chunk_id in self.seen:
                    return False
                self.seen.add(chunk_id)
            return True

    async def main() -> ChunkSink:
        sink = ChunkSink()
        server = ForwardServer(sink, port=0, chunk_ids=True)
        await server.start()
        client = await Client.connect(server)
        part = {"time": "2026-07-27T10:11:12.1Z", "stream": "stdout", "_p": "P", "log": "a" * 10}
        chunked = [TAG, [[T0, {"log": ROUTES}], [T0, part]], {"chunk": "c1"}]
        await client.send(chunked)
        assert await client.receive() == {"ack": "c1"}
        # one read: a plain message, the same chunk again, another plain message
        data = b"".join(
            msgpack.packb(m, use_bin_type=True)
            for m in ([TAG, T0, {"log": STARTUP}], chunked, [TAG, T0, {"log": ENGINE_FAILED}])
        )
        await client.send_raw(data)
        assert await client.receive() == {"ack": "c1"}
        await client.send([TAG, T0, {**part, "log": "b" * 10, "_p": "F"}])
        await until(lambda: any("a" * 10 + "b" * 10 in t for t, _ in sink.calls))
        await client.close()
        await server.stop()
        return sink

    sink = asyncio.run(main())
    texts = [t for batch, _ in sink.calls for t in batch]
    assert sink.calls[0] == ([ROUTES], "forward:c1")  # its partial line is held
    assert ([STARTUP], None) in sink.calls and ([ENGINE_FAILED], None) in sink.calls
    # the resent chunk's partial piece was dropped: the line is joined from one copy
    assert texts.count("a" * 10 + "b" * 10) == 1
    assert texts.count(ROUTES) == 2  # offered twice, refused by the sink the second time


def test_chunk_ids_unfinished_lines_reach_the_sink_after_the_timeout_and_at_stop():
    """With ``chunk_ids=True`` (the service's sink takes ``(records, chunk_id)``), a line
    whose closing chunk never came is handed over with ``chunk_id`` None: after
    ``partial_timeout``, and at :meth:`ForwardServer.stop`, which returns normally."""
    calls: list[tuple[list[str], str | None]] = []

    async def sink(records: list[LogRecord], chunk_id: str | None) -> bool:
        calls.append(([r.text for r in records], chunk_id))
        return True

    def chunk(text: str) -> dict[str, str]:
        return {"time": "2026-07-27T10:11:12.1Z", "stream": "stdout", "_p": "P", "log": text}

    async def main() -> None:
        server = ForwardServer(sink, port=0, chunk_ids=True, partial_timeout=0.2)
        await server.start()
        client = await Client.connect(server)
        await client.send([TAG, [[T0, chunk("a" * 10)]], {"chunk": "c1"}])
        assert await client.receive() == {"ack": "c1"}
        await until(lambda: (["a" * 10], None) in calls)  # flushed once idle
        await client.send(["other", [[T0, chunk("b" * 10)]], {"chunk": "c2"}])
        assert await client.receive() == {"ack": "c2"}
        await client.close()
        await server.stop()  # holds "b" * 10 unfinished: handed over, no TypeError

    asyncio.run(main())
    assert calls[-1] == (["b" * 10], None)
