#!/usr/bin/env python3
"""Publish captured real vLLM logs into the labelled corpus and write the manifest.

Reads tests/fixtures/real/<name>.meta.json (written by scenarios.py) and the labels below,
then writes

* tests/corpus/cases/real-cpu-<name>.log   (byte copy of tests/fixtures/real/<name>.log)
* tests/corpus/cases/real-cpu-<name>.json  (label sidecar, see tests/corpus/README.md)
* tests/fixtures/real/MANIFEST.md

    python3 scripts/capture/publish.py            # all scenarios that have a capture
    python3 scripts/capture/publish.py NAME ...   # only these

Labels are judged by hand from the captured output (stage = the stage the stream had
reached at the first real failure line; healthy = tier none / category healthy / last
stage reached). Re-check them after a re-capture.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REAL = REPO / "tests" / "fixtures" / "real"
CASES = REPO / "tests" / "corpus" / "cases"
VLLM_VERSION = "0.32.0"
TORCH_VERSION = "2.13.0+cpu"

ORDERLY = (
    "Orderly stop, not a failure: the `[shutdown] ...` INFO lines, the `force killing "
    "remaining process(es)` / `force killing sub process VLLM::Worker` WARNINGs, the "
    "ERROR `AsyncLLM output_handler failed.` traceback ending in `vllm.v1.engine."
    "exceptions.EngineDeadError`, and the `nanobind: leaked ...` / `resource_tracker: "
    "There appear to be N leaked ...` stderr lines are all shutdown noise."
)
COMMON = (
    "Harmless on every start of this build: `Triton is installed, but doesn't include CPU "
    "backend. Disabling Triton.` (stderr, unprefixed), `Triton is not installed. "
    "triton-cpu is expected on x86 CPUs.`, the ulimit WARNING, `libtcmalloc/libiomp is "
    "not found in LD_PRELOAD`, FutureWarning about torch.distributed.reduce_op."
)

# name -> (tier, category, stage, notes)
LABELS: dict[str, tuple[str, str, str, str]] = {
    "healthy-serving-prefix-caching-sigterm": (
        "none",
        "healthy",
        "serving",
        "Full startup with --enable-prefix-caching and VLLM_LOG_STATS_INTERVAL=2, GET "
        "/v1/models and 6 chat requests sharing a long system prompt (uvicorn access lines "
        "on stdout), `Engine 000: ... CPU KV cache usage: 0.0%, Prefix cache hit rate: N%` "
        "stats lines from (APIServer pid=N), then SIGTERM. First capture on a cold "
        "torch.compile cache (`saved AOT compiled function`). " + ORDERLY + " " + COMMON,
    ),
    "healthy-idle-sigint": (
        "none",
        "healthy",
        "api_server",
        "Startup to `Application startup complete.`, no requests, SIGINT after ~8 s. "
        + ORDERLY
        + " Also a WARNING `[backbone] Compiling model again due to a load failure from "
        "...torch_compile_cache... reason: 'function' object has no attribute "
        "'finalize_loading'` (warm compile cache; harmless). " + COMMON,
    ),
    "healthy-abbreviated-flag-accepted": (
        "none",
        "healthy",
        "api_server",
        "Trap case: the command has a misspelt, truncated flag `--enable-prefix-cachin`, but "
        "Python argparse accepts any unique prefix of a long option, so vLLM starts normally "
        "(`non-default args` shows 'enable_prefix_caching': True). Idle, then SIGTERM. " + ORDERLY,
    ),
    "kv-cache-too-small": (
        "capacity",
        "oom_kv_cache",
        "kv_cache_init",
        "Model with max_position_embeddings 4194304, --max-model-len 4000000, "
        "VLLM_CPU_KVCACHE_SPACE=1. EngineCore logs `EngineCore failed to start.` + traceback "
        "through _initialize_kv_caches/get_kv_cache_configs ending in `ValueError: To serve at "
        "least one request with the model's max seq len (4000000), (3.81 GiB KV cache is "
        "needed, which is larger than the available KV cache memory (1.0 GiB). ...`. "
        "Consequences after it: `Worker proc VllmWorker-0 died unexpectedly (exit code: 0)`, "
        "an unprefixed `Process EngineCore:` raw traceback repeating the ValueError, the "
        "APIServer raw traceback ending in `RuntimeError: Engine core initialization failed. "
        "See root cause above. Failed core proc(s): {'EngineCore': 1}`. Exit code 1.",
    ),
    "worker-killed-while-serving": (
        "capacity",
        "host_memory",
        "serving",
        "Served 2 requests, then 3 long generations (max_tokens 900, ignore_eos) were in "
        "flight and the `VLLM::Worker` process got SIGKILL (kill -9, as the kernel OOM "
        "killer would do; nothing in the log says 'Killed' or 'OOM'). First failure line: "
        "(EngineCore) ERROR `Worker proc VllmWorker-0 died unexpectedly (exit code: ...), "
        "shutting down executor.` (`exit code: None` in this capture - the executor noticed "
        "the death before the exit status was reaped; the reference run saw `-9`), "
        "then dump_input ERROR lines, `EngineCore encountered a fatal error.` traceback "
        "ending in `RuntimeError: cancelled` (shm_broadcast acquire_read), APIServer "
        "`AsyncLLM output_handler failed` -> EngineDeadError, HTTP 500s, and the API server "
        "shuts itself down. Exit code of the main process: 0 (!). Labelled host_memory as "
        "the brief's stand-in for an OOM kill; on a real node the kernel log would say so.",
    ),
    "enginecore-killed-while-serving": (
        "capacity",
        "host_memory",
        "serving",
        "Like worker-killed-while-serving, but SIGKILL to the `VLLM::EngineCore` process "
        "with 3 long generations in flight (OOM-killer stand-in). Hard case: there is NO "
        "ERROR naming the death except the cascade. The only specific line is the WARNING "
        "`(APIServer pid=N) WARNING ... [core_client.py:817] [shutdown] MPClient: engine core "
        "exited unexpectedly; starting cleanup` - tagged [shutdown] like orderly-stop noise. "
        "Then `[shutdown] MPClient: ...` INFO lines, the same `AsyncLLM output_handler "
        "failed` / EngineDeadError traceback as an orderly stop, `(Worker pid=N) INFO ... "
        "Parent process exited, terminating worker queues`, HTTP 500 access lines, uvicorn "
        "shutdown and exit code 0. What separates it from an orderly stop: no `[shutdown] "
        "API server: shutdown triggered` (no signal), `exited unexpectedly`, and the 500s.",
    ),
    "model-unavailable-offline": (
        "other",
        "model_unavailable",
        "cuda_init",
        "`vllm serve some-org/missing-model` with HF_HUB_OFFLINE=1 and an empty cache: right "
        "after `non-default args`, an uncaught (unprefixed) traceback from "
        "EngineArgs.__post_init__ -> get_model_path -> snapshot_download ending in "
        "`huggingface_hub.errors.LocalEntryNotFoundError: Cannot find an appropriate cached "
        "snapshot folder for the specified revision on the local disk and outgoing traffic "
        "has been disabled. ...`. Exit 1. Stage: fails during argument processing, before "
        "engine configuration; cuda_init as the earliest in-process rung (corpus convention).",
    ),
    "bad-tool-call-parser": (
        "other",
        "config_error",
        "cuda_init",
        "`--enable-auto-tool-choice --tool-call-parser kimi_k9`: after `non-default args`, "
        "uncaught traceback from validate_api_server_args ending in `KeyError: 'invalid tool "
        "call parser: kimi_k9 (chose from { apertus,...})'`. Exit 1. Stage: before engine "
        "configuration -> cuda_init (corpus convention for argument errors).",
    ),
    "bad-unknown-cli-flag": (
        "other",
        "config_error",
        "cuda_init",
        "`--kv-cache-size 1G` (no such option): the top-level argparse prints `usage: vllm "
        "[-h] [-v]` + the sub-command list and `vllm: error: unrecognized arguments: "
        "--kv-cache-size 1G` on stderr, exit 2; 5 lines, no vLLM-format line at all (only "
        "the unprefixed Triton notice). Stage cuda_init by the corpus "
        "convention for CLI-parse errors.",
    ),
    "bad-dtype": (
        "other",
        "config_error",
        "cuda_init",
        "`--dtype float8`: argparse `vllm serve: error: argument --dtype: invalid choice: "
        "'float8' (choose from 'auto', 'bfloat16', 'float', 'float16', 'float32', 'half')`, "
        "exit 2; only 3 lines. Stage cuda_init by the corpus convention for CLI-parse errors.",
    ),
    "bad-max-model-len-too-large": (
        "other",
        "config_error",
        "distributed_init",
        "`--max-model-len 8192` on a model with max_position_embeddings 2048: after "
        "`Resolved architecture: LlamaForCausalLM` an uncaught traceback through "
        "create_engine_config -> create_model_config ending in `pydantic_core._pydantic_core."
        "ValidationError: 1 validation error for ModelConfig` / `Value error, User-specified "
        "max_model_len (8192) is greater than the derived max_model_len "
        "(max_position_embeddings=2048.0 or model_max_length=None in model's config.json). "
        "To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. "
        "...` Exit 1. Stage: engine configuration (create_engine_config) = distributed_init "
        "per taxonomy; a reader could also argue cuda_init since no world/rank line was "
        "printed. The message mentions 'CUDA array out-of-bounds error' - not a CUDA failure.",
    ),
    "bad-env-kvcache-space": (
        "other",
        "config_error",
        "distributed_init",
        "VLLM_CPU_KVCACHE_SPACE=0.01 (must be whole GiB): engine configuration runs "
        "(`Resolved architecture`, `Using max model len 1024`, platform warnings) then an "
        "uncaught traceback through create_engine_config ending in `pydantic_core."
        "_pydantic_core.ValidationError: 1 validation error for VllmConfig` / `Value error, "
        "invalid literal for int() with base 10: '0.01' [type=value_error, ...]`. Exit 1. "
        "Stage: engine configuration = distributed_init (see bad-max-model-len-too-large).",
    ),
    "unsupported-cpu-attention-head-dim-16": (
        "integration",
        "backend_kernel",
        "serving",
        "Model with head dim 16 (hidden 64, 4 heads). Startup completes (warm-up does not hit "
        "the CPU attention kernel), the first chat request dies in the CPU attention kernel: "
        "(Worker) ERROR `WorkerProc hit an exception.` traceback (printed twice, through "
        "gpu_worker.py/gpu_model_runner.py even on CPU, then cpu_attn.py) ending in "
        "`RuntimeError: Unsupported CPU attention configuration: head_dim=16 isa=2 "
        "kv_cache_idx=0`; then EngineCore `EngineCore encountered a fatal error.` ending in "
        "`RuntimeError: Worker failed with error 'Unsupported CPU attention configuration: "
        "...', please check the stack trace above for the root cause`, APIServer "
        "EngineDeadError, HTTP 500, the API server shuts itself down (exit 0). Judged "
        "integration/backend_kernel: an attention backend kernel rejects the model's shape "
        "after initialisation succeeded (the GPU analogue is a FlashInfer/FlashAttention "
        "head-size refusal). Arguably other/config_error (wrong model for this platform); "
        "the fix is a different backend/model, not a driver or memory change. Stage serving "
        "because startup completed and the failure is on the first request.",
    ),
    "healthy-debug-logging": (
        "none",
        "healthy",
        "serving",
        "VLLM_LOGGING_LEVEL=DEBUG: hundreds of DEBUG lines, the [file:line] field becomes a "
        "path relative to the vllm package (e.g. `[v1/engine/core_client.py:NNN]`), 2 chat "
        "requests, SIGTERM. " + ORDERLY,
    ),
    "healthy-forced-colour": (
        "none",
        "healthy",
        "serving",
        "VLLM_LOGGING_COLOR=1 FORCE_COLOR=1 with stdout a pipe: real ANSI codes around the "
        "process prefix, level, time and [file:line]. 2 chat requests, SIGTERM. " + ORDERLY,
    ),
    "healthy-tp2": (
        "none",
        "healthy",
        "serving",
        "--tensor-parallel-size 2 with VLLM_CPU_OMP_THREADS_BIND='0|1': gloo world_size=2, "
        "(Worker_TP0 pid=N) / (Worker_TP1 pid=N) prefixes, 2 chat requests, SIGTERM. " + ORDERLY,
    ),
    "tp2-no-thread-binding": (
        "other",
        "config_error",
        "distributed_init",
        "--tensor-parallel-size 2 on a 2-core, 1-NUMA-node machine without "
        "VLLM_CPU_OMP_THREADS_BIND: `AssertionError: Not enough allowed NUMA nodes to bind "
        "threads of 2 local CPUWorkers...` while setting up the workers. Fix is an env "
        "setting (VLLM_CPU_OMP_THREADS_BIND) => config_error.",
    ),
    "port-in-use": (
        "other",
        "config_error",
        "cuda_init",
        "Another process already listens on 0.0.0.0:8000. Right after `non-default args` an "
        "uncaught, unprefixed traceback from setup_server -> create_server_socket ending in "
        "`OSError: [Errno 98] Address already in use`; exit 1, ~10 s after start (the socket "
        "is bound before the engine starts). Stage cuda_init (before engine configuration, "
        "corpus convention). A deployment/port conflict -> config_error.",
    ),
    "trust-remote-code-required": (
        "other",
        "config_error",
        "cuda_init",
        "Local model whose config.json has an auto_map to custom code, started without "
        "--trust-remote-code. First failure lines are logged ERRORs from the APIServer, "
        "multi-line (continuation lines end in CR): `ERROR ... [repo_utils.py:126] Error parsing config for "
        "/tmp/vllm-models/tiny-remote-code: The repository ... contains custom code which "
        "must be executed to correctly load the model. ...` / `Please pass the argument "
        "`trust_remote_code=True` to allow custom code to be run., retrying 1 of 2`, again "
        "from repo_utils.py:124, then an uncaught traceback through create_engine_config -> "
        "create_model_config ending in `pydantic_core._pydantic_core.ValidationError: 1 "
        "validation error for ModelConfig` / `Value error, The repository ... contains custom "
        "code ...`. Exit 1. Stage cuda_init: the first failure line (the repo_utils ERROR) "
        "comes right after `non-default args`, before any engine-configuration line, even "
        "though the traceback later runs through create_engine_config (README rule: the "
        "stage reached at the first failure line).",
    ),
    "tokenizer-missing": (
        "other",
        "model_unavailable",
        "distributed_init",
        "Local model directory with config + weights but no tokenizer files. Engine "
        "configuration completes (`Resolved architecture`, `Using max model len 1024`), then "
        "AsyncLLM builds the renderer/tokenizer and an uncaught traceback ends in "
        "`ValueError: Couldn't instantiate the backend tokenizer from one of: ` / `(1) a "
        "`tokenizers` library serialization file, ` ... `You need to have sentencepiece or "
        "tiktoken installed to convert a slow tokenizer to a fast one.` - misleading: "
        "sentencepiece and tiktoken ARE installed; the files are missing. Labelled "
        "model_unavailable (incomplete local model), arguably config_error (--tokenizer "
        "pointing elsewhere fixes it). Stage: after engine configuration, before the engine "
        "core process starts -> distributed_init.",
    ),
    "kv-cache-space-exceeds-ram": (
        "capacity",
        "oom_kv_cache",
        "kv_cache_init",
        "VLLM_CPU_KVCACHE_SPACE=64 on a host with ~22 GiB: after model load and the warm-up "
        "compile, (Worker) ERROR `WorkerProc hit an exception.` (traceback printed twice) "
        "from cpu_worker.determine_available_memory ending in `ValueError: Available memory "
        "on node 0 (9.64/11.84 GiB) on kv cache allocation is less than requested memory for "
        "kv (64.0 GiB). Decrease --kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE, or reduce "
        "CPU memory used by other processes.`, then EngineCore `EngineCore failed to start.` "
        "and the APIServer `Engine core initialization failed` cascade. vLLM's own preflight "
        "check, the CPU analogue of 'No available memory for the cache blocks' -> "
        "oom_kv_cache (nothing was OOM-killed).",
    ),
    "dev-shm-too-small": (
        "capacity",
        "host_memory",
        "distributed_init",
        "/dev/shm is a 256 KiB tmpfs (`unshare --mount` + `mount -t tmpfs -o size=256k`; the "
        "mount command itself prints nothing). EngineCore prints `DP group leader: ... "
        "world_size=1, local_world_size=1`, then while the executor creates its shared-memory "
        "message queue: `EngineCore failed to start.` traceback through _init_executor -> "
        "shm_broadcast ... check_shm_free_space ending in `RuntimeError: Insufficient space "
        "in /dev/shm for shared-memory allocation: 160 MiB required, 0 MiB free. Increase "
        "/dev/shm (e.g. --shm-size or --ipc=host).`, the unprefixed `Process EngineCore:` "
        "traceback, and the APIServer `RuntimeError: Engine core initialization failed. See "
        "root cause above. Failed core proc(s): {}` (empty dict this time). Exit 1.",
    ),
    "dev-shm-docker-default-64m": (
        "capacity",
        "host_memory",
        "distributed_init",
        "As dev-shm-too-small but /dev/shm is 64 MiB, Docker's default --shm-size: the same "
        "vLLM preflight `RuntimeError: Insufficient space in /dev/shm for shared-memory "
        "allocation: 160 MiB required, 64 MiB free. Increase /dev/shm (e.g. --shm-size or "
        "--ipc=host).` - i.e. this vLLM build does not start at all in a plain `docker run` "
        "without --shm-size/--ipc=host.",
    ),
    "rlimit-as-kv-alloc": (
        "capacity",
        "host_memory",
        "kv_cache_init",
        "Address-space limit (RLIMIT_AS = 6 GiB, i.e. `ulimit -v 6291456`, set on the server "
        "process and inherited by its children; a healthy worker peaks at ~3.6 GB virtual) "
        "with VLLM_CPU_KVCACHE_SPACE=8. vLLM's own check passes (`Explicitly set (8.0/11.84) "
        "GiB for KV cache on node 0.`, `CPU KV cache size: 8,388,608 tokens`), then the "
        "allocation fails: (Worker) ERROR `WorkerProc hit an exception.` (traceback twice) "
        "ending in `RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. "
        "DefaultCPUAllocator: can't allocate memory: you tried to allocate 8589934592 bytes. "
        "Error code 12 (Cannot allocate memory)`, EngineCore `EngineCore failed to start.` "
        "-> `RuntimeError: Worker failed with error '[enforce fail at alloc_cpu.cpp:127] ...', "
        "please check the stack trace above for the root cause`, `Worker proc VllmWorker-0 "
        "died unexpectedly (exit code: None)`, the APIServer `Engine core initialization "
        "failed` cascade, exit 1. Labelled host_memory (the process hit its host memory "
        "limit; DefaultCPUAllocator = host RAM); oom_kv_cache is defensible since the "
        "allocation that failed is the KV cache. A cgroup memory limit would instead "
        "OOM-kill (see worker-killed-while-serving).",
    ),
    "stall-multinode-no-peer": (
        "integration",
        "internode_network",
        "distributed_init",
        "stall: no error line; detected only by stall detection. --tensor-parallel-size 2 "
        "--nnodes 2 --node-rank 0 --master-addr 127.0.0.1 --master-port 29555 and no second "
        "node: the log goes silent while rank 0 waits for its peer; the whole process group "
        "was SIGKILLed after 90 s of silence (as a startup probe/restart would), so the log "
        "just stops.",
    ),
    "stall-multinode-no-peer-sigterm": (
        "integration",
        "internode_network",
        "distributed_init",
        "stall: no error line; detected only by stall detection. Same command as "
        "stall-multinode-no-peer (master port 29556). After 90 s of silence SIGTERM went to "
        "the main process, as kubelet does first: vLLM printed NOTHING and did not exit "
        "(the signal is not acted on while the API server waits for the engine core / the "
        "rank waits in the gloo TCP rendezvous); 90 s later the whole process group was "
        "SIGKILLed (exit -9). The log is therefore indistinguishable from the SIGKILL-only "
        "stall: last line `(Worker pid=N) INFO ... [parallel_state.py:1906] world_size=2 "
        "rank=0 local_rank=0 distributed_init_method=tcp://127.0.0.1:29556 backend=gloo`.",
    ),
    "healthy-client-errors": (
        "none",
        "healthy",
        "serving",
        "Trap case: a healthy server (VLLM_LOG_STATS_INTERVAL=2) answering bad client "
        "requests between two good ones: unknown model name -> an APIServer ERROR line "
        "`ERROR ... [serving.py:274] Error with model error=ErrorInfo(message='The model "
        "`gpt-4o` does not exist. Valid aliases: <path>', type='NotFoundError', "
        "param='model', code=404)` + access line 404; prompt longer than max-model-len, "
        "malformed JSON, max_tokens -1, max_tokens 5000 > max_model_len -> access lines "
        "`400 Bad Request` only (nothing else logged); GET /v2/nothing -> 404. Then stats "
        "lines and SIGTERM. " + ORDERLY,
    ),
    "weights-missing": (
        "other",
        "model_unavailable",
        "model_load",
        "Local model directory with config and tokenizer but no weight files. Startup runs "
        "to `Starting to load model /tmp/vllm-models/tiny-llama-noweights...`, then (Worker) "
        "ERROR `WorkerProc failed to start.` traceback ending in `RuntimeError: Cannot find "
        "any model weights with `/tmp/vllm-models/tiny-llama-noweights``, EngineCore "
        "`Exception: WorkerProc initialization failed due to an exception in a background "
        "process. See stack trace for root cause.` (logged and as unprefixed `Process "
        "EngineCore:` traceback - here the raw stderr traceback arrived BEFORE the logged "
        "stdout one), APIServer `RuntimeError: Engine core initialization failed. See root "
        "cause above. Failed core proc(s): {}`. Exit 1.",
    ),
    "weights-corrupt": (
        "other",
        "model_unavailable",
        "model_load",
        "model.safetensors truncated to 4 KiB (an interrupted download or copy). `Loading "
        "safetensors checkpoint shards:   0% Completed | 0/1` (tqdm on stderr, unprefixed) "
        "then (Worker) ERROR `WorkerProc failed to start.` traceback ending in "
        "`safetensors._safetensors_rust.SafetensorError: Error while deserializing header: "
        "incomplete metadata, file not fully covered`, then the same EngineCore/APIServer "
        "cascade as weights-missing. Labelled model_unavailable (the local weights are not "
        "usable; fix = re-download), could be argued as unknown.",
    ),
    "unsupported-architecture": (
        "other",
        "config_error",
        "cuda_init",
        "config.json names `SentinelTinyForCausalLM`, which vLLM does not implement. Right "
        "after `non-default args`, an uncaught traceback through create_engine_config -> "
        "create_model_config ending in `pydantic_core._pydantic_core.ValidationError: 1 "
        "validation error for ModelConfig` / `Value error, Model architectures "
        "['SentinelTinyForCausalLM'] are not supported for now. Supported architectures: "
        "dict_keys([...several hundred names...]) [type=value_error, ...]` (one very long "
        "line). Exit 1. Stage cuda_init: the failure line comes before any engine "
        "configuration line (`Resolved architecture` is never printed). config_error: wrong "
        "model for this vLLM version (upgrade vLLM or use another model).",
    ),
    "dev-shm-170m-tp2": (
        "capacity",
        "host_memory",
        "model_load",
        "/dev/shm is 170 MiB (passes the EngineCore's 160 MiB preflight) with "
        "--tensor-parallel-size 2 and VLLM_CPU_OMP_THREADS_BIND='0|1'. Both workers init "
        "gloo (world_size=2), start loading the model and load the weights, then each "
        "worker's message-queue set-up (WorkerProc __init__ -> _init_message_queues -> "
        "shm_broadcast ... check_shm_free_space) fails: `(Worker_TP1 pid=N) ERROR ... "
        "WorkerProc failed to start.` ... `RuntimeError: Insufficient space in /dev/shm for "
        "shared-memory allocation: 240 MiB required, 162 MiB free. Increase /dev/shm (e.g. "
        "--shm-size or --ipc=host).` (TP1 first, then TP0), then the EngineCore `Exception: "
        "WorkerProc initialization failed due to an exception in a background process` and "
        "APIServer `Engine core initialization failed ... Failed core proc(s): {}` cascade. "
        "Stage model_load: the first failure line follows `Starting to load model` / "
        "`Loading weights took` (although the failing code is message-queue set-up).",
    ),
}


def main() -> int:
    names = sys.argv[1:] or [n for n in LABELS if (REAL / f"{n}.meta.json").exists()]
    for n in names:
        tier, cat, stage, notes = LABELS[n]
        meta = json.loads((REAL / f"{n}.meta.json").read_text())
        shutil.copyfile(REAL / f"{n}.log", CASES / f"real-cpu-{n}.log")
        date = meta["started"][:10]
        side = {
            "tier": tier,
            "category": cat,
            "stage": stage,
            "source": f"real vllm-cpu {VLLM_VERSION} run on {date}, scripts/capture/"
            f"scenarios.py {n} (fixture tests/fixtures/real/{n}.log / .cri.log)",
            "vllm_version": VLLM_VERSION,
            "notes": notes,
        }
        (CASES / f"real-cpu-{n}.json").write_text(
            json.dumps(side, indent=2, ensure_ascii=False) + "\n"
        )
    write_manifest()
    return 0


def write_manifest() -> None:
    metas = []
    for p in sorted(REAL.glob("*.meta.json")):
        metas.append(json.loads(p.read_text()))
    order = {n: i for i, n in enumerate(LABELS)}
    metas.sort(key=lambda m: (order.get(m["name"], len(order)), m["name"]))
    out = [
        "# Real vLLM log fixtures (CPU build)",
        "",
        f"Captured by running `vllm serve` from the CPU build of vLLM (`vllm-cpu` {VLLM_VERSION}, "
        f"torch {TORCH_VERSION}, Python 3.11, 2-core x86-64, no GPU, no internet, "
        "`HF_HUB_OFFLINE=1`) on tiny random Llama checkpoints. Every line is vLLM's own output; "
        "nothing was edited. Re-capture by hand (not in CI):",
        "",
        "```bash",
        "scripts/capture/setup_vllm_cpu.sh                                   # venv in /tmp/vllm-cpu",
        "/tmp/vllm-cpu/bin/python scripts/capture/make_tiny_model.py /tmp/vllm-models",
        "HF_HUB_OFFLINE=1 python3 scripts/capture/scenarios.py NAME ...      # one vLLM at a time",
        "python3 scripts/capture/publish.py                                  # corpus copies + this file",
        "```",
        "",
        "Per scenario: `<name>.log` = stdout+stderr lines merged in arrival order, bytes as "
        "printed (`\\r` of vLLM's multi-line records, tqdm `\\r`, ANSI kept); `<name>.cri.log` "
        "= the same lines in CRI format (`<RFC3339Nano receive time> <stdout|stderr> <F|P> "
        "<line>`, `P` for a chunk still without newline when the stream closed); "
        "`<name>.meta.json` = command, extra env, exit code, line counts, what the driver did "
        "and when. Lines read in the same pipe read share a timestamp. The process was started "
        "without a TTY, stdin /dev/null, in its own process group; the env is the capture "
        "shell's plus the listed variables (always `HF_HUB_OFFLINE=1`; "
        "`VLLM_CPU_KVCACHE_SPACE=1` unless stated). The model directories are in /tmp/vllm-models "
        "(see make_tiny_model.py); `tiny-llama`: hidden 256, 4 heads, 2 KV heads, 2 layers, "
        "max_position_embeddings 2048, bf16. The torch.compile cache in ~/.cache/vllm was cold "
        "only for the first captures of each model.",
        "",
        "Labels (tier/category/stage) of each capture are in "
        "`tests/corpus/cases/real-cpu-<name>.json`.",
        "",
        "## Observations across the captures (vllm-cpu 0.32.0)",
        "",
        "- Process prefixes: `(APIServer pid=N)`, `(EngineCore pid=N)`, `(Worker pid=N)` with "
        "TP 1; with TP 2 a worker starts as `(Worker pid=N)` (its `world_size=2 rank=R` line "
        "carries that prefix) and switches to `(Worker_TP0 pid=N)` / `(Worker_TP1 pid=N)` "
        "from `Starting to load model` on. Every worker's first line is prefixed "
        "`(VllmWorker-0 pid=N)` (the multiprocessing name), then `(Worker pid=N)`.",
        "- Uncaught tracebacks (`Traceback (most recent call last):`, `Process EngineCore:` "
        "and the APIServer's final `RuntimeError: Engine core initialization failed. See root "
        "cause above. Failed core proc(s): {...}`) are NOT prefixed; logged tracebacks carry "
        "the full prefix + header on every line, continuation lines ending in `\\r`.",
        "- No `Automatically detected platform ...` line at all (not even at DEBUG); the first "
        "vLLM lines are the ASCII banner (`version 0.32.0`, `model ...`) and `non-default "
        "args: {...}`. `vLLM API server version` is not printed.",
        "- Unprefixed, harmless on every start: `Triton is installed, but doesn't include CPU "
        "backend. Disabling Triton.` (stderr, once per process), FutureWarnings about "
        "`torch.distributed.reduce_op`, torch C++ `[W1202 hh:mm:ss.ns utils.cpp:68] Warning: "
        "NUMA binding: ...`, and at exit `nanobind: leaked ...` blocks and `resource_tracker: "
        "There appear to be N leaked ...` warnings. The nanobind block ends without a newline, "
        "so the next writer's text (resource_tracker) is glued onto `See "
        "https://nanobind.readthedocs.io/en/latest/refleaks.html` on the same line.",
        "- Orderly stop (SIGTERM or SIGINT) and real engine death share lines: `[shutdown] "
        "...` INFO/WARNING lines, `force killing ...` WARNINGs and the ERROR `AsyncLLM "
        "output_handler failed.` -> `EngineDeadError` traceback appear in both. Orderly stops "
        "start with `[shutdown] API server: shutdown triggered`; engine deaths instead show "
        "`Worker proc VllmWorker-0 died unexpectedly`, `EngineCore encountered a fatal "
        "error.`, or only the WARNING `[shutdown] MPClient: engine core exited unexpectedly; "
        "starting cleanup`, plus HTTP 500 access lines. After an engine death the API server "
        "exits with code 0.",
        "- The stats line reports `Prefix cache hit rate` even without "
        "--enable-prefix-caching (prefix caching is on by default; DEBUG shows `Enabling "
        "prefix caching by default`).",
        "- stdout and stderr are separate pipes, so the merged order between a process's "
        "logged traceback (stdout) and its raw traceback (stderr) is not stable "
        "(weights-missing has the raw one first, kv-cache-too-small the logged one first).",
        "",
    ]
    for m in metas:
        n = m["name"]
        lab = LABELS.get(n)
        out += [
            f"## {n}",
            "",
            f"- what: {m.get('what', '')}",
            f"- date: {m['started']} .. {m['ended']}; vllm {VLLM_VERSION} (vllm-cpu), torch {TORCH_VERSION}",
            "- command: `"
            + " ".join(c.replace("/tmp/vllm-cpu/bin/vllm", "vllm") for c in m["cmd"])
            + "`",
            "- env: " + (", ".join(f"`{k}={v}`" for k, v in m["env"].items()) or "(none)"),
            f"- exit code: {m['returncode']}; lines: {m['lines']} (stdout {m['stdout_lines']}, "
            f"stderr {m['stderr_lines']}, partial {m['partial_lines']})",
        ]
        if lab:
            out.append(f"- label: {lab[0]}/{lab[1]}/{lab[2]}")
        events = [e.split(" ", 1)[1] for e in m.get("driver_events", []) if "started pid" not in e]
        if events:
            out.append("- driver: " + "; ".join(events))
        if m.get("extra_notes"):
            out.append(f"- notes: {m['extra_notes']}")
        if lab:
            out.append(f"- shows: {lab[3]}")
        out.append("")
    (REAL / "MANIFEST.md").write_text("\n".join(out))


if __name__ == "__main__":
    sys.exit(main())
