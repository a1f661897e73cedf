#!/usr/bin/env python3
"""Build the text classifier's training files from real seed strings.

    python training_data/generate.py [--seed 0] [--variants 10] [--out training_data]

Inputs
- ``training_data/seeds.yaml``: real failure and benign message strings, one template
  family per entry, each with its source (issue URL or ``owner/repo:path``).
- ``tests/fixtures/real/healthy-*.log``: real captured logs of healthy vLLM runs; every
  record in them is a benign line (category ``healthy``).

Outputs (JSONL, one example a line: text, category, tier, source, stage, family)
- ``real.jsonl``: the seed strings verbatim, with their sources.
- ``fixtures_healthy.jsonl``: records of the healthy fixture logs, vLLM header and
  process prefix stripped (multi-line records kept together, long ones shortened to their
  first line and last lines), ``source`` = the fixture path.
- ``generated.jsonl``: seeded variations of every seed, ``source`` =
  ``generated:<kind>:<family>``, same ``family`` as the seed (so a group split never puts a
  variation on the other side of its seed).
- ``ood.jsonl``: out-of-taxonomy error texts (seed category ``unknown``) and their
  variations: never a class, used only to choose the abstain threshold.

Variations (all drawn from ``random.Random(seed)``, so the output is reproducible):
- values: digits re-drawn, GPU model names, ``sm_XX`` capabilities, model ids, host names
  swapped for others of the same kind;
- context: 1-3 traceback frames from a pool matching the failure's stage (function names
  of the real vLLM / torch / huggingface code paths, e.g. ``load_model``, ``profile_run``,
  ``capture_model``, ``execute_model``), optionally under a generic cascade header
  (``Traceback (most recent call last):``, ``EngineCore failed to start.``...). Families
  whose message alone is ambiguous (the three GPU OOM categories) always get a frame;
- ``[rankN]:`` prefixes as torch distributed prints them, and truncation of long lines at a
  word boundary (log shippers cut long lines).

Never an input: ``tests/corpus/cases`` (the evaluation corpus) and the blind sets
``tests/blind/cases``, ``tests/blind2/cases`` (labelled before the classifier saw them). A
seed whose source names a case's source is refused.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections import Counter
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from service.classify.model_input import key_line  # noqa: E402
from service.taxonomy import CATEGORY_TIER  # noqa: E402

# families whose message is shared by several categories: never emitted without a frame
NEEDS_CONTEXT = {"oom_weights", "oom_kv_cache", "oom_runtime"}

SITES = (
    "/usr/local/lib/python3.12/dist-packages",
    "/opt/venv/lib/python3.12/site-packages",
    "/usr/local/lib/python3.10/dist-packages",
    "/opt/conda/lib/python3.11/site-packages",
    "/home/ubuntu/.venv/lib/python3.13/site-packages",
    "/app/.venv/lib64/python3.12/site-packages",
)

# Traceback frames by code path: (file under site-packages, function, source line)
FRAMES: dict[str, list[tuple[str, str, str]]] = {
    "cuda": [
        ("torch/cuda/__init__.py", "_lazy_init", "torch._C._cuda_init()"),
        ("torch/cuda/__init__.py", "current_device", "_lazy_init()"),
        ("torch/cuda/__init__.py", "set_device", "torch._C._cuda_setDevice(device)"),
        ("torch/cuda/__init__.py", "is_available", "return torch._C._cuda_getDeviceCount() > 0"),
        (
            "vllm/platforms/cuda.py",
            "get_device_capability",
            "major, minor = torch.cuda.get_device_capability(device_id)",
        ),
        ("vllm/worker/worker.py", "init_device", "torch.cuda.set_device(self.device)"),
        ("vllm/v1/worker/gpu_worker.py", "init_device", "current_platform.set_device(self.device)"),
        ("vllm/v1/worker/gpu_worker.py", "init_device", "self.init_snapshot = MemorySnapshot()"),
    ],
    "import": [
        ("vllm/_custom_ops.py", "<module>", "import vllm._C  # noqa"),
        (
            "vllm/__init__.py",
            "<module>",
            "from vllm.engine.arg_utils import AsyncEngineArgs, EngineArgs",
        ),
        ("vllm/entrypoints/cli/main.py", "main", "import vllm.entrypoints.cli.serve"),
        (
            "vllm/attention/backends/flash_attn.py",
            "<module>",
            "from vllm.vllm_flash_attn import flash_attn_varlen_func",
        ),
        ("torch/__init__.py", "<module>", "_load_global_deps()"),
        (
            "importlib/__init__.py",
            "import_module",
            "return _bootstrap._gcd_import(name[level:], package, level)",
        ),
    ],
    "dist": [
        (
            "vllm/distributed/parallel_state.py",
            "init_distributed_environment",
            "torch.distributed.init_process_group(",
        ),
        (
            "vllm/distributed/parallel_state.py",
            "initialize_model_parallel",
            "_TP = init_model_parallel_group(group_ranks,",
        ),
        (
            "vllm/distributed/parallel_state.py",
            "__init__",
            "self.pynccl_comm = PyNcclCommunicator(",
        ),
        (
            "vllm/distributed/device_communicators/pynccl.py",
            "__init__",
            "self.comm: ncclComm_t = self.nccl.ncclCommInitRank(",
        ),
        (
            "vllm/distributed/device_communicators/pynccl_wrapper.py",
            "NCCL_CHECK",
            'raise RuntimeError(f"NCCL error: {error_str}")',
        ),
        (
            "vllm/v1/worker/gpu_worker.py",
            "init_device",
            "init_worker_distributed_environment(self.vllm_config, self.rank,",
        ),
        (
            "vllm/executor/ray_distributed_executor.py",
            "_init_workers_ray",
            'self._run_workers("init_device")',
        ),
        ("torch/distributed/distributed_c10d.py", "new_group", "return _new_group_with_tag("),
        ("torch/distributed/c10d_logger.py", "wrapper", "func_return = func(*args, **kwargs)"),
        (
            "vllm/distributed/device_communicators/cuda_communicator.py",
            "__init__",
            "self.ca_comm = CustomAllreduce(",
        ),
    ],
    "load": [
        (
            "vllm/v1/worker/gpu_model_runner.py",
            "load_model",
            "self.model = model_loader.load_model(",
        ),
        (
            "vllm/worker/model_runner.py",
            "load_model",
            "self.model = get_model(vllm_config=self.vllm_config)",
        ),
        (
            "vllm/model_executor/model_loader/base_loader.py",
            "load_model",
            "self.load_weights(model, model_config)",
        ),
        (
            "vllm/model_executor/model_loader/default_loader.py",
            "load_weights",
            "loaded_weights = model.load_weights(",
        ),
        (
            "vllm/model_executor/models/llama.py",
            "load_weights",
            "weight_loader(param, loaded_weight)",
        ),
        (
            "vllm/model_executor/layers/linear.py",
            "create_weights",
            "weight = ModelWeightParameter(data=torch.empty(",
        ),
        (
            "vllm/model_executor/model_loader/utils.py",
            "initialize_model",
            "return model_class(vllm_config=vllm_config, prefix=prefix)",
        ),
        (
            "vllm/model_executor/model_loader/weight_utils.py",
            "safetensors_weights_iterator",
            'with safe_open(st_file, framework="pt") as f:',
        ),
        (
            "vllm/model_executor/layers/quantization/gptq_marlin.py",
            "process_weights_after_loading",
            "self.kernel.process_weights_after_loading(layer)",
        ),
        ("vllm/v1/worker/gpu_worker.py", "load_model", "self.model_runner.load_model()"),
    ],
    "profile": [
        (
            "vllm/v1/worker/gpu_worker.py",
            "determine_available_memory",
            "self.model_runner.profile_run()",
        ),
        (
            "vllm/v1/worker/gpu_model_runner.py",
            "profile_run",
            "hidden_states, last_hidden_states = self._dummy_run(",
        ),
        (
            "vllm/v1/worker/gpu_model_runner.py",
            "_dummy_sampler_run",
            "sampler_output = self.sampler(logits=logits,",
        ),
        (
            "vllm/worker/worker.py",
            "determine_num_available_blocks",
            "self.model_runner.profile_run()",
        ),
        (
            "vllm/v1/engine/core.py",
            "_initialize_kv_caches",
            "available_gpu_memory = self.model_executor.determine_available_memory()",
        ),
        (
            "vllm/v1/core/kv_cache_utils.py",
            "get_kv_cache_config",
            "check_enough_kv_cache_memory(vllm_config, kv_cache_spec, available_memory)",
        ),
        (
            "vllm/worker/worker.py",
            "initialize_cache",
            "raise_if_cache_size_invalid(num_gpu_blocks,",
        ),
        (
            "vllm/v1/worker/gpu_worker.py",
            "compile_or_warm_up_model",
            "self.model_runner._dummy_run(size, skip_eplb=True)",
        ),
        (
            "vllm/executor/executor_base.py",
            "initialize_cache",
            'self.collective_rpc("initialize_cache",',
        ),
    ],
    "capture": [
        ("vllm/v1/worker/gpu_model_runner.py", "capture_model", "self._capture_cudagraphs("),
        (
            "vllm/compilation/cuda_graph.py",
            "__call__",
            "with torch.cuda.graph(cudagraph, pool=self.graph_pool):",
        ),
        ("torch/cuda/graphs.py", "__exit__", "self.cuda_graph.capture_end()"),
        ("vllm/worker/model_runner.py", "capture_model", "graph_runner.capture(**capture_inputs)"),
        (
            "vllm/v1/worker/gpu_worker.py",
            "compile_or_warm_up_model",
            "self.model_runner.capture_model()",
        ),
    ],
    "runtime": [
        ("vllm/v1/engine/core.py", "run_busy_loop", "self._process_engine_step()"),
        ("vllm/v1/engine/core.py", "step", "model_output = self.execute_model_with_error_logging("),
        (
            "vllm/v1/executor/multiproc_executor.py",
            "worker_busy_loop",
            "output = func(*args, **kwargs)",
        ),
        ("vllm/v1/worker/gpu_model_runner.py", "execute_model", "model_output = self.model("),
        (
            "vllm/v1/worker/gpu_worker.py",
            "execute_model",
            "output = self.model_runner.execute_model(scheduler_output,",
        ),
        ("vllm/v1/sample/sampler.py", "forward", "logits = self.apply_logits_processors("),
        (
            "vllm/model_executor/layers/logits_processor.py",
            "forward",
            "logits = self._gather_logits(logits)",
        ),
        (
            "vllm/worker/model_runner.py",
            "execute_model",
            "hidden_or_intermediate_states = model_executable(",
        ),
        ("vllm/engine/llm_engine.py", "step", "outputs = self.model_executor.execute_model("),
    ],
    "kernel": [
        (
            "vllm/model_executor/layers/fused_moe/modular_kernel.py",
            "forward",
            "fused_out = self._maybe_chunk_fused_experts(",
        ),
        (
            "vllm/model_executor/layers/fused_moe/fused_moe.py",
            "invoke_fused_moe_kernel",
            "fused_moe_kernel[grid](",
        ),
        ("vllm/v1/attention/backends/flashinfer.py", "build", "fast_plan_decode("),
        ("flashinfer/prefill.py", "plan", "self._cached_module = get_batch_prefill_module("),
        (
            "vllm/model_executor/layers/fused_moe/deep_gemm_moe.py",
            "apply",
            "a1q, a1q_scale, expert_ids, inv_perm = deepgemm_moe_permute(",
        ),
        (
            "deep_ep/buffer.py",
            "dispatch",
            "return self.internode_dispatch(x, handle, num_tokens_per_rank,",
        ),
        ("triton/compiler/compiler.py", "compile", "next_module = compile_ir(module, metadata)"),
        (
            "torch/_inductor/compile_fx.py",
            "compile_fx_inner",
            "mb_compiled_graph = fx_codegen_and_compile(",
        ),
    ],
    "host": [
        ("multiprocessing/shared_memory.py", "__init__", "self._mmap = mmap.mmap(self._fd, size)"),
        (
            "vllm/distributed/device_communicators/shm_broadcast.py",
            "__init__",
            "self.shared_memory = shared_memory.SharedMemory(",
        ),
        (
            "torch/multiprocessing/reductions.py",
            "reduce_storage",
            "fd, size = storage._share_fd_cpu_()",
        ),
        (
            "vllm/v1/executor/multiproc_executor.py",
            "_init_executor",
            "self.rpc_broadcast_mq = MessageQueue(self.world_size, self.world_size)",
        ),
        ("multiprocessing/connection.py", "_recv_bytes", "buf = self._recv(4)"),
        ("safetensors/torch.py", "load_file", "result[k] = f.get_tensor(k)"),
    ],
    "config": [
        (
            "vllm/engine/arg_utils.py",
            "create_engine_config",
            "model_config = self.create_model_config()",
        ),
        ("vllm/config/model.py", "__post_init__", "self.max_model_len = _get_and_verify_max_len("),
        (
            "vllm/entrypoints/openai/api_server.py",
            "build_async_engine_client_from_engine_args",
            "vllm_config = engine_args.create_engine_config(usage_context=usage_context)",
        ),
        ("vllm/config/__init__.py", "verify_with_parallel_config", "raise ValueError("),
        ("vllm/entrypoints/cli/serve.py", "cmd", "uvloop.run(run_server(args))"),
        ("vllm/engine/arg_utils.py", "create_model_config", "return ModelConfig("),
    ],
    "hub": [
        (
            "huggingface_hub/file_download.py",
            "hf_hub_download",
            "return _hf_hub_download_to_cache_dir(",
        ),
        (
            "huggingface_hub/utils/_http.py",
            "hf_raise_for_status",
            "raise _format(RepositoryNotFoundError, message, response) from e",
        ),
        ("transformers/utils/hub.py", "cached_file", "resolved_file = hf_hub_download("),
        (
            "vllm/transformers_utils/config.py",
            "get_config",
            "config_dict, _ = PretrainedConfig.get_config_dict(",
        ),
        ("huggingface_hub/file_download.py", "get_hf_file_metadata", "hf_raise_for_status(r)"),
    ],
}
CASCADE_HEADERS = (
    "Traceback (most recent call last):",
    "EngineCore failed to start.",
    "WorkerProc failed to start.",
    "WorkerProc hit an exception.",
    "EngineCore encountered a fatal error.",
    "Process EngineCore_DP0:",
    "Error executing method 'init_device'. This might cause deadlock in distributed execution.",
)
GPUS = (
    "NVIDIA H100 80GB HBM3",
    "NVIDIA A100-SXM4-80GB",
    "NVIDIA GeForce RTX 5090",
    "NVIDIA GeForce RTX 4090",
    "Tesla T4",
    "Tesla V100-SXM2-32GB",
    "NVIDIA L40S",
    "NVIDIA A10G",
    "NVIDIA B200",
    "NVIDIA H200",
    "NVIDIA RTX A6000",
    "Tesla P100-PCIE-16GB",
    "NVIDIA GB200",
    "NVIDIA B300 SXM6 AC",
    "NVIDIA GeForce RTX 3090",
)
GPU_RE = re.compile("|".join(re.escape(g) for g in sorted(GPUS, key=len, reverse=True)))
SMS = (
    "sm_60",
    "sm_70",
    "sm_75",
    "sm_80",
    "sm_86",
    "sm_89",
    "sm_90",
    "sm_100",
    "sm_103",
    "sm_120",
    "sm_121",
)
SM_RE = re.compile(r"\bsm_\d{2,3}a?\b")
MODELS = (
    "meta-llama/Llama-3.1-8B-Instruct",
    "Qwen/Qwen2.5-72B-Instruct",
    "Qwen/Qwen3-32B",
    "mistralai/Mistral-7B-Instruct-v0.3",
    "deepseek-ai/DeepSeek-V3",
    "moonshotai/Kimi-K3",
    "google/gemma-2-27b-it",
    "openai/gpt-oss-120b",
    "microsoft/Phi-4-mini-instruct",
    "ibm-granite/granite-3.3-8b-instruct",
    "zai-org/GLM-4.5-Air",
    "RedHatAI/Kimi-K3-NVFP4",
)
MODEL_RE = re.compile(r"(?<![\w/.-])(?:[A-Za-z][\w-]*)/(?:[A-Za-z][\w.-]*\d[\w.-]*)(?![\w/])")
HOSTS = (
    "gpu-node-07",
    "a100-8",
    "node12",
    "h100-pool-3-x7k2p",
    "worker-5",
    "ip-10-0-87-143",
    "dgx-b200-02",
    "trainer-0",
    "vllm-0",
    "infer-7f9c",
)
NCCL_PFX_RE = re.compile(r"^(\[[^\]]+\] )?[\w.-]+:(\d+):(\d+) \[(\d+)\]")
DIGITS_RE = re.compile(r"(?<![\w.])\d+(?![\w])")
EXC_LINE = re.compile(r"^[\w.]*(Error|Exception|Warning)\b.*:")

HEADER_RE = re.compile(
    r"^(?:\((?:[A-Za-z][\w -]*?)(?: (?:TP )?rank=\d+)? pid=\d+(?:, ip=[\d.:a-f]+)?\) )*"
    r"(?:(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) \d{2}-\d{2} \d{2}:\d{2}:\d{2} "
    r"\[?[\w./-]+:\d+\] ?)?"
)


def load_seeds(path: Path) -> list[dict]:
    seeds = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(seeds, list):
        raise SystemExit(f"{path}: expected a list of families")
    seen = set()
    for e in seeds:
        for key in ("family", "category", "source", "texts"):
            if key not in e:
                raise SystemExit(f"{path}: family {e.get('family')!r} lacks {key!r}")
        if e["family"] in seen:
            raise SystemExit(f"{path}: duplicate family {e['family']!r}")
        seen.add(e["family"])
        if e["category"] not in CATEGORY_TIER:
            raise SystemExit(f"{path}: {e['family']}: category {e['category']!r} not in taxonomy")
        if e.get("context", "none") not in FRAMES and e.get("context", "none") != "none":
            raise SystemExit(f"{path}: {e['family']}: unknown context {e['context']!r}")
    return seeds


def corpus_sources(repo: Path) -> set[str]:
    out = set()
    held_out = [
        *(repo / "tests" / "corpus" / "cases").glob("*.json"),
        *(repo / "tests").glob("blind*/cases/*.json"),
    ]
    for p in sorted(held_out):
        try:
            src = json.loads(p.read_text(encoding="utf-8")).get("source", "")
        except ValueError:
            continue
        if isinstance(src, str) and src.startswith("http"):
            out.add(src.rstrip("/"))
    return out


def check_not_corpus(seeds: list[dict], forbidden: set[str]) -> None:
    bad = []
    for e in seeds:
        for part in re.split(r";\s*", e["source"]):
            url = part.split(" ")[0].rstrip("/")
            if url in forbidden:
                bad.append((e["family"], url))
    if bad:
        raise SystemExit(f"seeds cite held-out corpus cases as sources: {bad}")


def _frame(rng: random.Random, pool: str) -> list[str]:
    f, fn, code = rng.choice(FRAMES[pool])
    site = rng.choice(SITES)
    line = rng.randint(40, 3200)
    return [f'  File "{site}/{f}", line {line}, in {fn}', f"    {code}"]


def with_context(rng: random.Random, text: str, pool: str, force: bool) -> tuple[str, bool]:
    if pool == "none" or (not force and rng.random() < 0.4):
        return text, False
    lines: list[str] = []
    if rng.random() < 0.5:
        lines.append(rng.choice(CASCADE_HEADERS))
    for _ in range(rng.randint(1, 3)):
        lines += _frame(rng, pool)
    return "\n".join(lines + [text]), True


def vary_values(rng: random.Random, text: str) -> str:
    t = GPU_RE.sub(lambda m: rng.choice(GPUS), text)
    t = SM_RE.sub(lambda m: rng.choice(SMS), t)
    t = MODEL_RE.sub(
        lambda m: (
            rng.choice(MODELS)
            if "/" in m.group(0)
            and not m.group(0).startswith(("dev/", "tmp/"))
            and "." not in m.group(0).split("/")[0]
            else m.group(0)
        ),
        t,
    )
    t = NCCL_PFX_RE.sub(
        lambda m: (
            f"{m.group(1) or ''}{rng.choice(HOSTS)}:{rng.randint(30, 99999)}:"
            f"{rng.randint(30, 99999)} [{rng.randint(0, 7)}]"
        ),
        t,
    )
    if rng.random() < 0.6:
        t = DIGITS_RE.sub(
            lambda m: (
                str(rng.randint(0, 10 ** len(m.group(0)) - 1))
                if len(m.group(0)) > 1
                else m.group(0)
            ),
            t,
        )
    return t


def vary(rng: random.Random, seed: dict, text: str) -> tuple[str, str]:
    """One variation of ``text``; returns (text, kind)."""
    kinds = []
    t = vary_values(rng, text)
    kinds.append("values")
    if "\n" not in t and len(t) > 160 and rng.random() < 0.25:
        cut = t.rfind(" ", 0, int(len(t) * rng.uniform(0.55, 0.9)))
        if cut > 60:
            t = t[:cut]
            kinds.append("truncated")
    force = seed["category"] in NEEDS_CONTEXT and bool(OOM_MESSAGE.search(text))
    t, added = with_context(rng, t, seed.get("context", "none"), force)
    if added:
        kinds.append("context")
    if EXC_LINE.match(text) and rng.random() < 0.12:
        r = rng.randint(0, 15)
        t = "\n".join(f"[rank{r}]: {line}" for line in t.split("\n"))
        kinds.append("rankprefix")
    return t, "+".join(kinds)


DEFAULT_CONTEXT = {
    "driver_incompatible": "cuda",
    "gpu_not_visible": "cuda",
    "arch_unsupported": "runtime",
    "library_mismatch": "import",
    "nccl_error": "dist",
    "mlx5_registration": "none",
    "internode_network": "dist",
    "backend_kernel": "kernel",
    "oom_weights": "load",
    "oom_kv_cache": "profile",
    "oom_runtime": "runtime",
    "host_memory": "none",
    "config_error": "config",
    "model_unavailable": "hub",
    "healthy": "none",
    "unknown": "none",
}
# contexts that place a GPU OOM message in its category
OOM_CONTEXTS = {
    "oom_weights": ("load",),
    "oom_kv_cache": ("profile", "capture"),
    "oom_runtime": ("runtime",),
}
OOM_MESSAGE = re.compile(r"out of memory|OutOfMemoryError", re.IGNORECASE)

# catalogue sections (docs/failure-strings-*.md "## N. `category`") -> category
_SECTION = re.compile(r"^## (\d+)\. (.*)$")
_CAT_IN_HEADING = re.compile(r"`([a-z_0-9]+)`")
_PLACEHOLDER = re.compile(r"<([^<>\n]{1,40})>")
# a log header left in a catalogue quote: "(Worker pid=...) ERROR ... [x.py:N] "
_LOG_HEAD = re.compile(
    r"^(?:\([^)]*\)\s*)*(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+(?:\.\.\.|…|\S+ \S+)\s+"
    r"\[?[\w./<>…-]+:[\w<>…]*\]\s*)"
)
_PRINTF = re.compile(r"%(?:\d+)?(?:z|l|ll)?([sdiuxpf])")


def _fill_placeholder(m: re.Match[str]) -> str:
    name = m.group(1).lower()
    if name in ("…", "...", "site-packages", "path", "site", "venv", "prefix"):
        return "/usr/local/lib/python3.12/dist-packages" if "site" in name else "/opt/app"
    if (
        any(k in name for k in ("n", "num", "pid", "rank", "size", "port", "bytes", "d"))
        and len(name) <= 6
    ):
        return "7"
    if "host" in name or "node" in name:
        return "node-1"
    if "ip" in name or "addr" in name:
        return "10.0.0.2"
    if "model" in name:
        return "Qwen/Qwen3-8B"
    if "gpu" in name:
        return "NVIDIA H100 80GB HBM3"
    return "x"


def _first_cell(row: str) -> str:
    """The first cell of a markdown table row, honouring `code spans` that contain '|'."""
    body = row.strip()[1:]
    in_code = False
    for i, ch in enumerate(body):
        if ch == "`":
            in_code = not in_code
        elif ch == "|" and not in_code:
            return body[:i]
    return body


def _top_level_spans(cell: str) -> list[str]:
    """`code spans` of a cell that are not inside parentheses (those name surrounding
    lines, e.g. "(between `X` and `Y`)", not the message itself)."""
    spans, depth, start, in_code = [], 0, -1, False
    for i, ch in enumerate(cell):
        if ch == "`":
            if in_code:
                if depth == 0:
                    spans.append(cell[start + 1 : i])
                in_code = False
            else:
                in_code, start = True, i
        elif not in_code and ch == "(":
            depth += 1
        elif not in_code and ch == ")":
            depth = max(0, depth - 1)
    return spans


def _corpus_refs(forbidden_urls: set[str]) -> set[tuple[str, str]]:
    refs = set()
    for url in forbidden_urls:
        m = re.search(r"github\.com/[^/]+/([^/]+)/(?:issues|pull)/(\d+)", url)
        if m:
            refs.add((m.group(1).lower(), m.group(2)))
    return refs


def _independent_source(cell: str, refs: set[tuple[str, str]]) -> str | None:
    """The row's source text with corpus-case citations removed, or None if nothing else
    is left (the string was only seen in a held-out corpus case)."""
    t = re.sub(r"\(?case `[^`]*`\)?", " ", cell)
    t = re.sub(r"\[[^\]]*(?:gh-|real-cpu-)[^\]]*\]", " ", t)
    t = re.sub(r"`?(?:gh|real-cpu)-[\w.…-]+`?", " ", t)

    def drop_ref(m: re.Match[str]) -> str:
        repo = m.group(1).split("/")[-1].lower()
        return " " if (repo, m.group(2)) in refs else m.group(0)

    t = re.sub(r"([\w./-]+) #(\d+)", drop_ref, t)
    t = re.sub(
        r"https?://github\.com/[^/]+/([^/\s]+)/(?:issues|pull)/(\d+)",
        lambda m: " " if (m.group(1).lower(), m.group(2)) in refs else m.group(0),
        t,
    )
    if re.search(
        r"#\d+|https?://|\w:`?[\w./]+|\bid \d+|source|HEAD|\.(?:cc|py|h|so)\b|"
        r"reference|vllm|torch|nccl|NVIDIA|PR",
        t,
    ):
        return " ".join(t.split())[:200]
    return None


def catalogue_seeds(doc: Path, forbidden_urls: set[str]) -> list[dict]:
    """Seed families from a failure-strings catalogue: one per table row of a category
    section; benign look-alike sections give `healthy`, cascade / unknown sections give
    out-of-taxonomy text. Rows seen only in held-out corpus cases are skipped."""
    refs = _corpus_refs(forbidden_urls)
    out: list[dict] = []
    category = None
    section = ""
    for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
        m = _SECTION.match(line)
        if m:
            section = m.group(1)
            heading = m.group(2).lower()
            cat = _CAT_IN_HEADING.search(m.group(2))
            if "negative" in heading or "look-alike" in heading:
                category = "healthy"
            elif "cascade" in heading:
                category = "unknown"
            elif cat and cat.group(1) in CATEGORY_TIER:
                category = cat.group(1)
            else:
                category = None
            continue
        if category is None or not line.startswith("|") or line.startswith("|---"):
            continue
        first = _first_cell(line)
        spans = [
            x
            for x in _top_level_spans(first)
            if len(x) >= 20 and re.search(r"[A-Za-z]{3}", x) and not re.match(r"^(vllm|torch):", x)
        ]
        if not spans:
            continue
        src = _independent_source(line[len(first) + 1 :], refs)
        if src is None:
            continue
        texts = []
        for x in spans:
            x = _LOG_HEAD.sub("", x)
            x = _PLACEHOLDER.sub(_fill_placeholder, x).replace("…", "...").strip()
            x = _PRINTF.sub(lambda m: "node-1" if m.group(1) == "s" else "7", x)
            if (
                x.count("...") > 2
                or len(x) < 30
                or len(x.split()) < 4
                or x.startswith(("frame #", "File ", "self.", "return "))
            ):
                continue
            texts.append(x)
        if not texts:
            continue
        out.append(
            {
                "family": f"doc.{doc.stem.replace('failure-strings-', '')}.s{section}.l{n}",
                "category": category,
                "source": f"vllm-sentinel:docs/{doc.name}:{n} ({src})",
                "context": DEFAULT_CONTEXT.get(category, "none"),
                "texts": texts,
                "from_catalogue": True,
            }
        )
    return out


_FMT = re.compile(r"%(?:\([\w]+\))?[-+ #0]*\d*(?:\.\d+)?([sdifrxg%])")
_LOG_CALLS = {"info", "warning", "info_once", "warning_once"}


def _fill_format(msg: str, rng: random.Random) -> str:
    def sub(m: re.Match[str]) -> str:
        k = m.group(1)
        if k == "%":
            return "%"
        if k in "dx":
            return str(rng.choice((0, 1, 2, 4, 8, 16, 128, 4096, 32768)))
        if k in "fg":
            return f"{rng.uniform(0.1, 90):.2f}"
        return rng.choice(
            (
                "auto",
                "cuda",
                "Qwen/Qwen3-8B",
                "True",
                "FLASH_ATTN",
                "bfloat16",
                "/root/.cache/vllm",
                "enable_prefix_caching",
                "0",
            )
        )

    return _FMT.sub(sub, msg)


def _literal(node, rng: random.Random) -> str | None:
    import ast

    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            else:
                parts.append(rng.choice(("auto", "8", "cuda:0", "True", "Qwen/Qwen3-8B", "0.90")))
        return "".join(parts)
    if isinstance(node, ast.BinOp):
        a, b = _literal(node.left, rng), _literal(node.right, rng)
        return a + b if a is not None and b is not None else None
    return None


def extract_vllm_benign(site: Path, seed: int) -> list[dict]:
    """INFO/WARNING message strings of an installed vLLM (``logger.info/warning[_once]``
    first arguments, %-formats and f-string fields filled with plausible values): the
    non-fatal chatter a healthy server can print. Run once with ``--vllm-src``; the result
    is committed as ``vllm_source_benign.jsonl``."""
    import ast

    rng = random.Random(seed)
    root = site / "vllm"
    version = "unknown"
    for meta in site.glob("vllm-*.dist-info/METADATA"):
        m = re.search(r"^Version: (.+)$", meta.read_text(), re.M)
        if m:
            version = m.group(1).strip()
    out, seen = [], set()
    for path in sorted(root.rglob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        rel = path.relative_to(site).as_posix()
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in _LOG_CALLS
                and node.args
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "logger"
            ):
                continue
            msg = _literal(node.args[0], rng)
            if msg is None:
                continue
            msg = _fill_format(msg, rng).strip()
            if len(msg) < 25 or len(msg.split()) < 4 or msg in seen:
                continue
            seen.add(msg)
            out.append(
                _row(
                    msg,
                    "healthy",
                    f"vllm-project/vllm:{rel}:{node.lineno} (vllm {version}, "
                    f"logger.{node.func.attr})",
                    f"vllmsrc:{rel}:{node.lineno}",
                    None,
                )
            )
    return out


# lines that are consequences of another failure (or of a shutdown): whatever a catalogue
# or fixture calls them, they never teach the model "healthy" (nor a failure category)
CASCADE_KEY = re.compile(
    r"EngineDeadError|died unexpectedly|Engine core initialization failed|EngineCore failed to "
    r"start|Engine process failed to start|WorkerProc (?:hit an exception|failed to start)|"
    r"Executor failed|AsyncEngineDeadError|fatal signal from worker|Background loop has errored"
)
FAILURE_WORDS = re.compile(
    r"fail|error|timed out|timeout|dead\b|cannot|unable|exceed|bigger than|not found|refused|"
    r"out of memory|\bOOM\b|killed|insufficient|too old|mismatch|not supported|unsupported",
    re.IGNORECASE,
)


def _row(text: str, category: str, source: str, family: str, stage: str | None) -> dict:
    row = {
        "text": text,
        "category": category,
        "tier": CATEGORY_TIER[category],
        "source": source,
        "family": family,
    }
    if stage:
        row["stage"] = stage
    return row


def fixture_records(path: Path) -> list[str]:
    """Records of a real captured log with vLLM header and process prefixes stripped."""
    records: list[list[str]] = []
    last_key = None
    for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
        line = re.sub(r"\x1b\[[0-9;]*m", "", raw).rstrip("\r")
        m = HEADER_RE.match(line)
        head = m.group(0) if m else ""
        msg = line[len(head) :]
        key = head if m and m.group("level") else None
        if not msg.strip() and key is None:
            last_key = None
            continue
        same_record = key is not None and key == last_key
        continuation = key is None and last_key is None and msg.startswith((" ", "\t"))
        if records and (same_record or continuation):
            records[-1].append(msg)
        else:
            records.append([msg])
        last_key = key
    out = []
    for rec in records:
        rec = [r for r in rec if r.strip()]
        if not rec:
            continue
        if len(rec) > 5:
            rec = [rec[0]] + rec[-4:]
        out.append("\n".join(rec))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--variants", type=int, default=10, help="variations per failure text")
    ap.add_argument("--healthy-variants", type=int, default=3, help="variations per benign text")
    ap.add_argument("--out", type=Path, default=HERE)
    ap.add_argument(
        "--benign-sample",
        type=int,
        default=900,
        help="how many vLLM-source benign strings to use (0: none)",
    )
    ap.add_argument(
        "--vllm-src",
        type=Path,
        default=None,
        metavar="SITE_PACKAGES",
        help="re-extract vllm_source_benign.jsonl from an installed vLLM",
    )
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)

    if args.vllm_src is not None:
        rows = extract_vllm_benign(args.vllm_src, args.seed)
        with (HERE / "sources" / "vllm_log_strings.jsonl").open("w", encoding="utf-8") as fh:
            for r in rows:
                fh.write(json.dumps(r, ensure_ascii=False) + "\n")
        print(f"extracted {len(rows)} benign vLLM log strings", file=sys.stderr)
    forbidden = corpus_sources(REPO)
    seeds = load_seeds(HERE / "seeds.yaml")
    check_not_corpus(seeds, forbidden)
    n_yaml = len(seeds)
    for doc in sorted((REPO / "docs").glob("failure-strings-*.md")):
        seeds += catalogue_seeds(doc, forbidden)
    # a catalogue quote that is only part of a benign line ("Capturing CUDA graphs ...",
    # named as the place a failure happened) is not a failure wording
    from service.parse.masking import mask as _mask

    benign = [_mask(t) for e in seeds if e["category"] == "healthy" for t in e["texts"]]
    for e in seeds:
        if e.get("from_catalogue") and e["category"] not in ("healthy", "unknown"):
            e["texts"] = [t for t in e["texts"] if not any(_mask(t) in b for b in benign)]
    # and a benign look-alike that is word for word a failure wording elsewhere (benign only
    # on other platforms, e.g. Ascend) stays a failure example
    failing = {
        _mask(t)
        for e in seeds
        if e["category"] not in ("healthy", "unknown") and not e.get("from_catalogue")
        for t in e["texts"]
    }
    for e in seeds:
        if e.get("from_catalogue") and e["category"] == "healthy":
            e["texts"] = [t for t in e["texts"] if _mask(t) not in failing]
    # a wording that two sources put in two categories is ambiguous: abstain material
    labels: dict[str, set[str]] = {}
    for e in seeds:
        for t in e["texts"]:
            labels.setdefault(_mask(t), set()).add(e["category"])
    # (GPU OOM messages are shared by the OOM categories on purpose: context decides)
    ambiguous = {
        m
        for m, cats in labels.items()
        if len(cats - {"unknown"}) > 1
        and not (cats <= set(NEEDS_CONTEXT) and OOM_MESSAGE.search(m))
    }
    if ambiguous:
        moved = []
        for e in seeds:
            keep = [t for t in e["texts"] if _mask(t) not in ambiguous]
            moved += [t for t in e["texts"] if _mask(t) in ambiguous]
            e["texts"] = keep
        seeds.append(
            {
                "family": "ood.ambiguous",
                "category": "unknown",
                "context": "none",
                "source": "seed wordings labelled differently by two sources",
                "texts": sorted(set(moved)),
            }
        )
    seeds = [e for e in seeds if e["texts"]]
    print(
        f"{n_yaml} seed families from seeds.yaml, {len(seeds) - n_yaml} from "
        "docs/failure-strings-*.md",
        file=sys.stderr,
    )

    real, generated, ood = [], [], []
    for e in seeds:
        cat, stage = e["category"], e.get("stage")
        if cat == "healthy" and any(CASCADE_KEY.search(t) for t in e["texts"]):
            cat = "unknown"  # shutdown/cascade look-alikes: abstain material, not "healthy"
        is_ood = cat == "unknown"
        n = args.healthy_variants if cat in ("healthy", "unknown") else args.variants
        for i, text in enumerate(e["texts"]):
            text = text.rstrip("\n")
            fam = f"{e['family']}.t{i}"  # one template (wording) = one split group
            if is_ood:
                ood.append(_row(text, cat, e["source"], fam, None))
            elif not (cat in NEEDS_CONTEXT and OOM_MESSAGE.search(text) and 'File "' not in text):
                real.append(_row(text, cat, e["source"], fam, stage))
            seen = {text}
            for _ in range(n * 3):
                if len(seen) > n:
                    break
                t, kind = vary(rng, e, text)
                if t in seen:
                    continue
                seen.add(t)
                row = _row(t, cat, f"generated:{kind}:{fam}", fam, stage)
                (ood if is_ood else generated).append(row)

    # GPU OOM messages are shared by three categories: only the context tells them apart,
    # so every OOM wording is crossed with every OOM category's context.
    oom_pool = sorted(
        {
            t.rstrip("\n")
            for e in seeds
            if e["category"] in OOM_CONTEXTS
            for t in e["texts"]
            if OOM_MESSAGE.search(t)
        }
    )
    for cat, pools in OOM_CONTEXTS.items():
        for i, msg in enumerate(oom_pool):
            fam = f"oompool.{cat}.m{i}"
            seen = set()
            for _ in range(4):
                pool = rng.choice(pools)
                t, _added = with_context(rng, vary_values(rng, msg), pool, force=True)
                if t in seen:
                    continue
                seen.add(t)
                generated.append(_row(t, cat, f"generated:oom-pool+{pool}:{fam}", fam, None))

    fixtures = []
    fx_dir = REPO / "tests" / "fixtures" / "real"
    seen_fx = set()
    for p in sorted(fx_dir.glob("healthy*.log")):
        if p.name.endswith(".cri.log"):
            continue
        for rec in fixture_records(p):
            if rec in seen_fx or CASCADE_KEY.search(key_line(rec)):
                continue
            seen_fx.add(rec)
            first = rec.split("\n", 1)[0]
            fam = "fixture:" + re.sub(r"\d+", "N", first)[:60]
            fixtures.append(
                _row(rec, "healthy", f"vllm-sentinel:tests/fixtures/real/{p.name}", fam, None)
            )

    # benign INFO/WARNING strings from vLLM's source (extracted once, see --vllm-src):
    # a seeded sample, minus any whose masked form is also a failure example's
    src_rows = []
    benign_all = HERE / "sources" / "vllm_log_strings.jsonl"
    if benign_all.exists() and args.benign_sample > 0:
        from service.parse.masking import mask

        failure_masks = {mask(r["text"]) for r in real + generated if r["category"] != "healthy"}
        failure_keys = {
            mask(t.rstrip("\n"))
            for e in seeds
            if e["category"] not in ("healthy", "unknown")
            for t in e["texts"]
        }
        pool = [json.loads(x) for x in benign_all.read_text(encoding="utf-8").splitlines() if x]
        pool = [
            r
            for r in pool
            if mask(r["text"]) not in failure_masks
            and not FAILURE_WORDS.search(r["text"])
            and not CASCADE_KEY.search(r["text"])
            and not any(k in mask(r["text"]) for k in failure_keys if len(k) > 30)
        ]
        rng_b = random.Random(args.seed + 1)
        src_rows = rng_b.sample(pool, min(args.benign_sample, len(pool)))
        src_rows.sort(key=lambda r: r["family"])

    out = args.out
    for name, rows in (
        ("vllm_source_benign.jsonl", src_rows),
        ("real.jsonl", real),
        ("generated.jsonl", generated),
        ("fixtures_healthy.jsonl", fixtures),
        ("ood.jsonl", ood),
    ):
        with (out / name).open("w", encoding="utf-8") as fh:
            for r in rows:
                fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    counts = Counter(r["category"] for r in real + generated + fixtures + src_rows)
    print(
        f"real {len(real)}, generated {len(generated)}, fixtures {len(fixtures)}, "
        f"vllm source benign {len(src_rows)}, ood {len(ood)}",
        file=sys.stderr,
    )
    for c, n in sorted(counts.items()):
        print(f"  {c:20s} {n}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
