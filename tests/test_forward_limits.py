"""The forward port under abuse, over real sockets: closed by default beyond loopback, a
connection cap, idle timeouts, a global budget for unfinished frames, tag bounds, and
descriptor exhaustion survived with bounded logs while the API keeps answering."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import msgpack
import pytest
import uvicorn
import yaml
from pydantic import ValidationError

from service.api import create_app
from service.classify.rulebook import RuleBook
from service.config import ForwardSettings, Settings
from service.ingest.bounds import MAX_TAG
from service.netguard import InsecureConfigError, check_forward_config
from service.sources.forward.connection import CLOSED
from service.sources.forward.server import ForwardServer
from tests.api_support import close_context, make_context
from tests.ingest_samples import ROUTES, STARTUP, TAG, rejects
from tests.test_forward import HOST, T0, Client, Sink, record, until

ROOT = Path(__file__).resolve().parents[1]


def closed_total(reason: str) -> float:
    return CLOSED.labels(reason=reason)._value.get()


async def state(client: Client, wait: float) -> str:
    """``closed`` if the server closed the connection within ``wait`` seconds, else
    ``open``."""
    try:
        data = await asyncio.wait_for(client.reader.read(65536), wait)
    except TimeoutError:
        return "open"
    except ConnectionError:
        return "closed"
    return "closed" if data == b"" else "open"


async def forward(sink: Sink, **options: object) -> ForwardServer:
    server = ForwardServer(sink, port=0, self_hostname=HOST, **options)
    await server.start()
    return server


# ---- exposure ---------------------------------------------------------------------------
def test_beyond_loopback_without_a_shared_key_the_server_refuses_to_start(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        server = ForwardServer(Sink(), host="0.0.0.0", port=0)
        with pytest.raises(InsecureConfigError, match="shared key"):
            await server.start()
        assert server._listeners == []  # nothing was bound
        keyed = ForwardServer(Sink(), host="0.0.0.0", port=0, shared_key="k3y")
        await keyed.start()
        assert keyed.port != 0
        await keyed.stop()
        with caplog.at_level(logging.WARNING, logger="vllm_sentinel.ingest.forward"):
            open_anyway = ForwardServer(Sink(), host="0.0.0.0", port=0, allow_unauthenticated=True)
            await open_anyway.start()
            await open_anyway.stop()
        assert "NO AUTHENTICATION" in caplog.text

    asyncio.run(main())


def test_the_start_up_check_covers_the_forward_port() -> None:
    with pytest.raises(InsecureConfigError, match="SHARED_KEY"):
        check_forward_config(ForwardSettings(host="0.0.0.0"))
    with pytest.raises(InsecureConfigError):
        check_forward_config(ForwardSettings(host="::"))
    with pytest.raises(InsecureConfigError, match="sources.forward.shared_key is too short"):
        check_forward_config(ForwardSettings(host="0.0.0.0", shared_key="k3y"))
    check_forward_config(ForwardSettings(host="0.0.0.0", shared_key="kQ8vX2mP9rL4tW7zY1nB3cD5"))
    check_forward_config(ForwardSettings(host="0.0.0.0", allow_unauthenticated=True))
    check_forward_config(ForwardSettings(host="127.0.0.1"))
    check_forward_config(None)


def test_serve_refuses_an_open_forward_port_before_touching_the_store(tmp_path: Path) -> None:
    from service.app import serve

    db = tmp_path / "never.db"
    config = tmp_path / "sentinel.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "api": {"token": "t0ken"},
                "store": {"url": f"sqlite:///{db}"},
                "sources": {"forward": {"host": "0.0.0.0", "port": 0}},
            }
        )
    )
    with pytest.raises(InsecureConfigError, match="forward"):
        serve(str(config))
    assert not db.exists()


def test_a_blank_shared_key_is_refused() -> None:
    for key in ("", "   ", "\t\n"):
        with pytest.raises(ValidationError):
            ForwardSettings(shared_key=key)
        with pytest.raises(ValueError):
            ForwardServer(Sink(), shared_key=key)


def test_the_image_does_not_open_the_forward_port(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Dockerfile's environment, alone and under the Kubernetes config map."""
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    active = "\n".join(ln for ln in lines if not ln.lstrip().startswith("#"))
    pairs = re.findall(r"(SENTINEL_[A-Z_]+)=(\S+)", active)
    assert ("SENTINEL_API__HOST", "0.0.0.0") in pairs
    for name, value in pairs:
        monkeypatch.setenv(name, value)
    alone = Settings()
    check_forward_config(alone.sources.forward)  # loopback, so it starts
    assert alone.sources.forward is not None and alone.sources.forward.host == "127.0.0.1"
    cm = yaml.safe_load((ROOT / "deploy" / "kubernetes" / "base" / "configmap.yaml").read_text())
    in_cluster = Settings(**yaml.safe_load(cm["data"]["sentinel.yaml"]))
    assert in_cluster.sources.forward is None  # the image's env does not turn it back on


# ---- connection cap -----------------------------------------------------------------------
def test_connections_beyond_the_cap_are_closed_and_the_api_still_answers(tmp_path: Path) -> None:
    cap = 20

    async def main() -> None:
        ctx = make_context(tmp_path / "s.db", RuleBook())
        sink = Sink()
        server = await forward(sink, max_connections=cap)
        api = uvicorn.Server(
            uvicorn.Config(
                create_app(ctx), host="127.0.0.1", port=0, log_level="warning", lifespan="off"
            )
        )
        serving = asyncio.create_task(api.serve())
        clients: list[Client] = []
        try:
            await until(lambda: api.started, 10)
            api_port = api.servers[0].sockets[0].getsockname()[1]
            before = rejects("forward", "too_many_connections")
            for _ in range(cap + 10):
                clients.append(await Client.connect(server))
            states = await asyncio.gather(*(state(c, 1.0) for c in clients))
            assert states.count("closed") == 10 and states.count("open") == cap
            assert server.open_connections == cap
            assert rejects("forward", "too_many_connections") == before + 10
            async with httpx.AsyncClient() as http:
                r = await http.get(f"http://127.0.0.1:{api_port}/healthz", timeout=5)
                assert r.status_code == 200
            kept = [c for c, s in zip(clients, states, strict=True) if s == "open"]
            await kept[0].send([TAG, T0, record(ROUTES), {"chunk": "held"}])
            assert await kept[0].receive() == {"ack": "held"}  # the held ones still work
            for c in kept[:5]:
                await c.close()
            await until(lambda: server.open_connections == cap - 5)
            fresh = await Client.connect(server)
            clients.append(fresh)
            await fresh.send([TAG, T0, record(STARTUP), {"chunk": "fresh"}])
            assert await fresh.receive() == {"ack": "fresh"}
            assert [r.text for r in sink.records] == [ROUTES, STARTUP]
        finally:
            for c in clients:
                await c.close()
            api.should_exit = True
            await serving
            await server.stop()
            close_context(ctx)

    asyncio.run(main())


# ---- idle timeout -------------------------------------------------------------------------
def test_an_idle_connection_is_closed_after_the_timeout_an_active_one_is_not() -> None:
    async def main() -> None:
        sink = Sink()
        server = await forward(sink, idle_timeout=1.0)
        before = closed_total("idle_timeout")
        try:
            idle = await Client.connect(server)
            active = await Client.connect(server)
            started = time.monotonic()
            while time.monotonic() - started < 2.5:  # heartbeats well inside the timeout
                await active.send(None)
                await asyncio.sleep(0.1)
            assert await state(idle, 3.0) == "closed"
            await active.send([TAG, T0, record(ROUTES), {"chunk": "alive"}])
            assert await active.receive() == {"ack": "alive"}
            assert closed_total("idle_timeout") == before + 1
            assert server.open_connections == 1
            await active.close()
            await idle.close()
        finally:
            await server.stop()

    asyncio.run(main())


# ---- unfinished frames --------------------------------------------------------------------
def test_unfinished_frames_over_the_global_budget_close_the_connection_that_passes_it() -> None:
    budget = 100_000
    frame_a = msgpack.packb([TAG, T0, record("a" * 150_000), {"chunk": "a"}])
    frame_b = msgpack.packb([TAG, T0, record("b" * 150_000), {"chunk": "b"}])

    async def main() -> None:
        sink = Sink()
        server = await forward(
            sink, max_pending_bytes=budget, max_message_bytes=1 << 20, max_line=1 << 20
        )
        before = rejects("forward", "frame_budget")
        try:
            a = await Client.connect(server)
            await a.send_raw(frame_a[:60_000])
            await until(lambda: server.pending_bytes == 60_000)
            b = await Client.connect(server)
            await b.send_raw(frame_b[:60_000])  # 120 000 unfinished bytes in all: too many
            assert await state(b, 3.0) == "closed"
            assert rejects("forward", "frame_budget") == before + 1
            await until(lambda: server.pending_bytes == 60_000)  # b's bytes were released
            await a.send_raw(frame_a[60_000:])
            assert await a.receive() == {"ack": "a"}
            assert server.pending_bytes == 0
            assert [len(r.text) for r in sink.records] == [150_000]
            c = await Client.connect(server)  # the budget is free again
            await c.send_raw(frame_b[:90_000])
            await until(lambda: server.pending_bytes == 90_000)
            await c.send_raw(frame_b[90_000:])
            assert await c.receive() == {"ack": "b"}
            await a.close()
            await b.close()
            await c.close()
        finally:
            await server.stop()
        assert server.pending_bytes == 0

    asyncio.run(main())


def test_an_unauthenticated_peer_cannot_park_a_large_frame_before_the_handshake() -> None:
    async def main() -> None:
        server = await forward(Sink(), shared_key="k3y", max_message_bytes=1 << 20)
        before = rejects("forward", "auth_failed")
        try:
            client = await Client.connect(server)
            assert (await client.receive())[0] == "HELO"
            frame = msgpack.packb(["PING", "x" * 500_000])
            await client.send_raw(frame[:200_000])  # never finished
            assert await state(client, 3.0) == "closed"
            assert rejects("forward", "auth_failed") == before + 1
            assert server.pending_bytes == 0
        finally:
            await server.stop()

    asyncio.run(main())


# ---- tags -----------------------------------------------------------------------------------
def test_a_tag_over_the_bound_is_dropped_acked_and_counted() -> None:
    async def main() -> None:
        sink = Sink()
        server = await forward(sink)
        before = rejects("forward", "tag_too_long")
        try:
            client = await Client.connect(server)
            await client.send(["t" * (MAX_TAG + 1), T0, record(ROUTES), {"chunk": "long"}])
            assert await client.receive() == {"ack": "long"}  # resending would not help
            await client.send(["t" * MAX_TAG, T0, record(STARTUP), {"chunk": "ok"}])
            assert await client.receive() == {"ack": "ok"}
            assert [r.text for r in sink.records] == [STARTUP]
            assert rejects("forward", "tag_too_long") == before + 1
            await client.close()
        finally:
            await server.stop()

    asyncio.run(main())


# ---- descriptor exhaustion ------------------------------------------------------------------
class Child:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.forward_fd_child"],
            cwd=ROOT,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.ports = self.read()

    def read(self) -> dict:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, "the child died"
        return json.loads(line)

    def ask(self, command: str) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.read()

    def healthy(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{self.ports['api']}/", timeout=2).text == "ok":
                    return True
            time.sleep(0.1)
        return False


def wait_for(check: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def closed_by_peer(sock: socket.socket, wait: float) -> bool:
    sock.settimeout(wait)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def test_descriptor_exhaustion_is_survived_with_bounded_logs_and_the_api_answers() -> None:
    child = Child()
    socks: list[socket.socket] = []
    try:
        cap = child.ports["cap"]
        assert cap == 256 - 128  # the cap left room for the API under the child's limit
        # 1. a flood of idle connections: the cap holds, descriptors stay for the API
        for _ in range(cap + 70):
            socks.append(socket.create_connection(("127.0.0.1", child.ports["forward"])))
        wait_for(lambda: child.ask("stats")["open"] == cap)
        assert child.healthy(5)
        for s in socks:
            s.close()
        socks.clear()
        wait_for(lambda: child.ask("stats")["open"] == 0)
        errors_before = sum(child.ask("stats")["errors"].values())
        # 2. every descriptor taken: connections pile up on both ports
        assert child.ask("exhaust")["held"] > 0
        for _ in range(60):
            socks.append(socket.create_connection(("127.0.0.1", child.ports["forward"])))
        api_waiting = [
            socket.create_connection(("127.0.0.1", child.ports["api"])) for _ in range(20)
        ]
        socks += api_waiting
        time.sleep(3)
        stats = child.ask("stats")
        assert stats["accept_errors"] >= 2  # it did run out, and retried
        # one line per listener and 10 s, not one (with a traceback) per waiting connection
        assert sum(stats["errors"].values()) - errors_before <= 4, stats
        assert stats["longest"] < 400
        shed = sum(closed_by_peer(s, 0.2) for s in socks[:60])
        assert shed > 0  # forward clients got a clean close instead of hanging
        # 3. descriptors back: both listeners serve again
        child.ask("release")
        assert child.healthy(10)
        client = socket.create_connection(("127.0.0.1", child.ports["forward"]))
        socks.append(client)
        client.sendall(msgpack.packb([TAG, T0, record(ROUTES), {"chunk": "back"}]))
        client.settimeout(5)
        assert msgpack.unpackb(client.recv(1024)) == {"ack": "back"}
    finally:
        for s in socks:
            s.close()
        if child.proc.poll() is None:
            with contextlib.suppress(Exception):
                child.proc.stdin.write("quit\n")  # type: ignore[union-attr]
                child.proc.stdin.flush()  # type: ignore[union-attr]
            try:
                child.proc.wait(10)
            except subprocess.TimeoutExpired:
                child.proc.kill()
                child.proc.wait()
    assert child.proc.returncode == 0
