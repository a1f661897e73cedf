#!/usr/bin/env python3
"""Run a command the way a container runtime would and keep its log twice.

For re-capturing the real vLLM fixtures in tests/fixtures/real by hand (not used in CI).

The child gets stdout and stderr on two separate pipes (no TTY, like a container without
``tty: true``). Two reader threads read raw bytes from the pipes and cut them into lines at
``\\n`` only, so ``\\r`` (vLLM's multi-line records, tqdm bars) and ANSI escapes are kept
byte for byte.  Each completed line is stamped with the wall-clock time its newline arrived
and appended, under one lock, to a single arrival-ordered list.  At the end two files are
written:

* ``<name>.log``      the merged lines in arrival order, exactly as printed (bytes);
* ``<name>.cri.log``  the same lines in CRI (containerd/CRI-O) format::

      2026-12-02T14:11:12.123456789Z stderr F <line>

  ``F`` marks a full line; a chunk still without its newline when the stream closed (e.g.
  the process was killed mid-line) is written with ``P``.

A ``<name>.meta.json`` with the command, the extra environment, exit status, times and
line counts is written too.

Usable as a library (``Capture``; see scenarios.py, which drives requests and signals while
the capture runs) or from the command line::

    run_and_capture.py --name demo --outdir /tmp/out --timeout 120 \\
        --env VLLM_CPU_KVCACHE_SPACE=1 -- vllm serve /tmp/vllm-models/tiny-llama
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

ANSI_RE = re.compile(rb"\x1b\[[0-9;]*m")


def rfc3339nano(ns: int) -> str:
    sec, frac = divmod(ns, 1_000_000_000)
    base = datetime.fromtimestamp(sec, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{base}.{frac:09d}Z"


class Capture:
    """Start ``cmd``; collect its stdout/stderr lines in arrival order with timestamps."""

    def __init__(
        self,
        name: str,
        cmd: list[str],
        env_extra: dict[str, str] | None = None,
        cwd: str | None = None,
        preexec_fn=None,
    ):
        self.name = name
        self.cmd = cmd
        self.env_extra = dict(env_extra or {})
        self.cwd = cwd
        self.preexec_fn = preexec_fn
        # entries: (ns, stream, bytes_without_newline, complete: bool)
        self.lines: list[tuple[int, str, bytes, bool]] = []
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.last_output_ns = time.time_ns()
        self.proc: subprocess.Popen | None = None
        self.threads: list[threading.Thread] = []
        self.started_ns = 0
        self.ended_ns = 0
        self.events: list[tuple[str, str]] = []  # (timestamp, what the driver did)

    # ---------------------------------------------------------------- process
    def start(self) -> Capture:
        env = dict(os.environ)
        env.update(self.env_extra)
        self.started_ns = time.time_ns()
        self.proc = subprocess.Popen(
            self.cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=self.cwd,
            bufsize=0,
            start_new_session=True,  # own process group, so the whole tree can be killed
            preexec_fn=self.preexec_fn,
        )
        for stream, pipe in (("stdout", self.proc.stdout), ("stderr", self.proc.stderr)):
            t = threading.Thread(target=self._reader, args=(stream, pipe.fileno()), daemon=True)
            t.start()
            self.threads.append(t)
        return self

    def _reader(self, stream: str, fd: int) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            buf += chunk
            now = time.time_ns()
            parts = buf.split(b"\n")
            buf = parts.pop()  # tail without newline (possibly b"")
            if parts:
                with self.cond:
                    for p in parts:
                        self.lines.append((now, stream, p, True))
                    self.last_output_ns = now
                    self.cond.notify_all()
            elif chunk:
                with self.cond:
                    self.last_output_ns = now
        if buf:  # stream closed with an unterminated chunk: CRI "P"
            with self.cond:
                self.lines.append((time.time_ns(), stream, buf, False))
                self.cond.notify_all()

    def note(self, what: str) -> None:
        ts = rfc3339nano(time.time_ns())
        self.events.append((ts, what))
        print(f"[capture {self.name}] {ts} {what}", file=sys.stderr, flush=True)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def send_signal(self, sig: int) -> None:
        if self.alive():
            self.note(f"send {signal.Signals(sig).name} to pid {self.pid}")
            os.kill(self.pid, sig)

    def kill_group(self, sig: int = signal.SIGKILL) -> None:
        """Kill the whole process group (what a runtime does after the grace period)."""
        if self.proc is None:
            return
        try:
            self.note(f"send {signal.Signals(sig).name} to process group {self.pid}")
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass

    # ---------------------------------------------------------------- waiting
    def text(self) -> str:
        with self.lock:
            return "\n".join(
                ANSI_RE.sub(b"", ln[2]).decode("utf-8", "replace") for ln in self.lines
            )

    def wait_for(self, pattern: str, timeout: float, start_index: int = 0) -> bool:
        """Wait until a line (ANSI stripped) matches regex ``pattern``; False on timeout/exit."""
        rx = re.compile(pattern)
        deadline = time.time() + timeout
        idx = start_index
        with self.cond:
            while True:
                while idx < len(self.lines):
                    if rx.search(ANSI_RE.sub(b"", self.lines[idx][2]).decode("utf-8", "replace")):
                        return True
                    idx += 1
                if not self.alive() and all(not t.is_alive() for t in self.threads):
                    return False
                left = deadline - time.time()
                if left <= 0:
                    return False
                self.cond.wait(min(left, 1.0))

    def seconds_silent(self) -> float:
        with self.lock:
            return (time.time_ns() - self.last_output_ns) / 1e9

    def wait_exit(self, timeout: float) -> int | None:
        assert self.proc is not None
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        for t in self.threads:
            t.join(10)
        return rc

    def finish(self, grace: float = 30.0) -> int:
        """Wait ``grace`` s for exit, then SIGKILL the group; join readers."""
        rc = self.wait_exit(grace)
        if rc is None:
            self.kill_group(signal.SIGKILL)
            rc = self.wait_exit(30)
        # stray children that survived in the group (e.g. orphaned workers)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        for t in self.threads:
            t.join(10)
        self.ended_ns = time.time_ns()
        return rc if rc is not None else -999

    # ---------------------------------------------------------------- output
    def write(self, outdir: Path, extra_meta: dict | None = None) -> dict:
        outdir.mkdir(parents=True, exist_ok=True)
        with self.lock:
            lines = list(self.lines)
        raw = bytearray()
        cri = bytearray()
        for ns, stream, data, complete in lines:
            raw += data + (b"\n" if complete else b"")
            cri += f"{rfc3339nano(ns)} {stream} {'F' if complete else 'P'} ".encode() + data + b"\n"
        (outdir / f"{self.name}.log").write_bytes(bytes(raw))
        (outdir / f"{self.name}.cri.log").write_bytes(bytes(cri))
        meta = {
            "name": self.name,
            "cmd": self.cmd,
            "env": self.env_extra,
            "started": rfc3339nano(self.started_ns),
            "ended": rfc3339nano(self.ended_ns or time.time_ns()),
            "returncode": self.proc.returncode if self.proc else None,
            "lines": len(lines),
            "stdout_lines": sum(1 for ln in lines if ln[1] == "stdout"),
            "stderr_lines": sum(1 for ln in lines if ln[1] == "stderr"),
            "partial_lines": sum(1 for ln in lines if not ln[3]),
            "driver_events": [f"{t} {w}" for t, w in self.events],
        }
        if extra_meta:
            meta.update(extra_meta)
        (outdir / f"{self.name}.meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        return meta


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--name", required=True)
    ap.add_argument("--outdir", default="tests/fixtures/real")
    ap.add_argument("--env", action="append", default=[], help="KEY=VALUE (repeatable)")
    ap.add_argument("--timeout", type=float, default=300, help="SIGTERM after this many seconds")
    ap.add_argument(
        "--kill-after-silence",
        type=float,
        default=0,
        help="SIGKILL the process group after this many seconds without output",
    )
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    env = dict(kv.split("=", 1) for kv in a.env)
    cap = Capture(a.name, cmd, env).start()
    deadline = time.time() + a.timeout
    while cap.alive() and time.time() < deadline:
        if a.kill_after_silence and cap.seconds_silent() > a.kill_after_silence:
            cap.note(f"no output for {a.kill_after_silence:.0f} s")
            cap.kill_group(signal.SIGKILL)
            break
        time.sleep(0.5)
    if cap.alive():
        cap.send_signal(signal.SIGTERM)
    rc = cap.finish()
    meta = cap.write(Path(a.outdir))
    print(json.dumps({k: meta[k] for k in ("name", "returncode", "lines")}))
    return 0 if rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
