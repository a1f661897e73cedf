"""The stage is a judgement from evidence (markers, frames, what the failing line talks
about, its logger's file), with the per-category default as the last resort; the written
stage conventions (docs/taxonomy.md) hold for every output."""

from __future__ import annotations

import itertools

import pytest

from service.classify.loader import build_classifier
from service.classify.rulebook import RuleBook
from service.offline.report import classify_records
from service.records import LogRecord

RB = RuleBook()
CLF = build_classifier()
_N = itertools.count()


def first(*lines: str) -> tuple[str, str, str] | None:
    reps = classify_records([LogRecord(f"e{next(_N)}", t) for t in lines], CLF)
    incs = reps[0]["incidents"]
    return (incs[0]["tier"], incs[0]["category"], incs[0]["stage"]) if incs else None


def test_every_evidence_example_points_to_its_stage() -> None:
    for stage, pats in RB.stage_rules.evidence.items():
        for p in pats:
            assert RB.stage_evidence(p.example, None) == stage, p.example


@pytest.mark.parametrize(
    "fileinfo, stage",
    [
        ("parallel_state.py:1906", "distributed_init"),
        ("v1/worker/kv_cache_utils.py:12", "kv_cache_init"),
        ("serving_chat.py:3", "serving"),
        ("rdma_context.cpp:203", "kv_cache_init"),
        ("core.py:500", None),
    ],
)
def test_the_logger_file_names_a_stage(fileinfo: str, stage: str | None) -> None:
    assert RB.stage_evidence("something failed", fileinfo) == stage


@pytest.mark.parametrize(
    "lines, expected",
    [
        # an OOM while serving a request is oom_runtime, not a weights default
        (
            [
                "ERROR 08-01 10:00:00 [serving_chat.py:1] Error in chat completion stream generator for "
                "request_id chatcmpl-5f1e0a9b2c: torch.OutOfMemoryError: CUDA out of memory. Tried to "
                "allocate 232.00 MiB. GPU 0 has a total capacity of 23.57 GiB of which 154.25 MiB is free."
            ],
            ("capacity", "oom_runtime", "serving"),
        ),
        # graph capture puts an OOM in kv_cache_init
        (
            [
                "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 448.00 MiB. "
                "GPU 7 has a total capacity of 95.00 GiB of which 100.00 MiB is free."
            ],
            ("capacity", "oom_kv_cache", "kv_cache_init"),
        ),
        # the container runtime refused: that rung, whatever the library
        (
            [
                "nvidia-container-cli: initialization error: load library failed: libnvidia-ml.so.1: "
                "cannot open shared object file: no such file or directory: unknown."
            ],
            ("compatibility", "gpu_not_visible", "container"),
        ),
        # conventions: invalid engine arguments are cuda_init, model resolution is model_load
        (
            [
                "ValueError: Total number of attention heads (64) must be divisible by tensor parallel "
                "size (3)."
            ],
            ("other", "config_error", "cuda_init"),
        ),
        (
            ["OSError: You are trying to access a gated repo."],
            ("other", "model_unavailable", "model_load"),
        ),
        # a port conflict in a CI viewer's gutter inside a markdown quote
        (
            [
                ">   | [2024-09-05T00:38:34Z] ERROR:    [Errno 98] error while attempting to bind on "
                "address ('0.0.0.0', 44319): [errno 98] address already in use"
            ],
            ("other", "config_error", "api_server"),
        ),
    ],
)
def test_stage_and_category_follow_the_evidence(lines: list[str], expected) -> None:
    assert first(*lines) == expected


def test_optional_nccl_library_probes_never_page() -> None:
    assert (
        first(
            "v100-gpu-1:14926:14926 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open "
            "libibverbs.so[.1]"
        )
        is None
    )


@pytest.mark.parametrize(
    "lines, expected",
    [
        # llama.cpp / ollama: the context's compute graph did not fit (the analogue of profiling)
        (
            [
                "llama_model_loader: loaded meta data with 33 key-value pairs and 626 tensors",
                "llama_kv_cache_init:  CUDA_Host KV buffer size =  8192.00 MiB",
                "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 4507.00 MiB on device 0: "
                "cudaMalloc failed: out of memory",
                "ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 4725934080",
                "llama_new_context_with_model: failed to allocate compute buffers",
            ],
            ("capacity", "oom_kv_cache", "kv_cache_init"),
        ),
        # ... while the same allocator failing before any context is the weights
        (
            [
                "llama_model_loader: loaded meta data with 33 key-value pairs and 626 tensors",
                "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 23862.50 MiB on device 0: "
                "cudaMalloc failed: out of memory",
                "llama_model_load: error loading model: unable to allocate CUDA0 buffer",
            ],
            ("capacity", "oom_weights", "model_load"),
        ),
        # SGLang: a JIT kernel build failing while CUDA graphs are captured
        (
            [
                "Capturing batches (bs=32 avail_mem=10.30 GB):   0%|          | 0/8",
                "(SGLangEngine pid=23902) subprocess.CalledProcessError: Command '['ninja', '-v', "
                "'-C', '/root/.cache/flashinfer/cached_ops']' returned non-zero exit status 1.",
            ],
            ("integration", "backend_kernel", "kv_cache_init"),
        ),
        # an OOM naming the sampler warm-up is kv_cache_init, even after the load summary's
        # absence and with no frame
        (
            [
                "ERROR 03-20 02:29:07 [core.py:340] RuntimeError: CUDA out of memory occurred when "
                "warming up sampler with 1024 dummy requests. Please try lowering `max_num_seqs`"
            ],
            ("capacity", "oom_kv_cache", "kv_cache_init"),
        ),
        # the compute buffers of a llama.cpp context, with no ladder line at all
        (
            ["llama_new_context_with_model: failed to allocate compute buffers"],
            ("capacity", "oom_kv_cache", "kv_cache_init"),
        ),
        # Ascend HCCL failing to listen is the collective's set-up
        (
            [
                "[ERROR] HCCL(2717288,python3):2025-07-23-03:47:57.070.463 [hccl_socket.cc:100] "
                "[2717288][HcclSocket][Listen] socket type[1], listen on ip[192.168.20.160] and "
                "specific port[16666] fail. Please check the port status"
            ],
            ("integration", "nccl_error", "distributed_init"),
        ),
    ],
)
def test_other_engines_ladders_place_the_failure(lines: list[str], expected) -> None:
    stream = f"s{next(_N)}"
    reps = classify_records([LogRecord(stream, t) for t in lines], CLF)
    incs = reps[0]["incidents"]
    assert (incs[0]["tier"], incs[0]["category"], incs[0]["stage"]) == expected


def test_aws_ofi_plugin_fallback_never_pages() -> None:
    reps = classify_records(
        [
            LogRecord("ofi", t)
            for t in (
                "w-1:22:572 [1] nccl_net_ofi_create_plugin:204 NCCL WARN NET/OFI Failed to "
                "initialize sendrecv protocol",
                "w-1:22:572 [1] nccl_net_ofi_create_plugin:257 NCCL WARN NET/OFI aws-ofi-nccl "
                "initialization failed",
                "w-1:22:572 [1] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.5<0>",
            )
        ],
        CLF,
    )
    assert reps[0]["incidents"] == []


def test_vllm_c_missing_is_noise_on_tpu_only() -> None:
    warn = (
        "WARNING 10-20 00:02:14 [interface.py:176] Failed to import from vllm._C: "
        "ModuleNotFoundError(\"No module named 'vllm._C'\")"
    )
    tpu = classify_records(
        [
            LogRecord("tpu", "INFO 10-20 00:02:12 [__init__.py:22] TPU info: node_name=dev"),
            LogRecord("tpu", warn),
        ],
        CLF,
    )
    assert tpu[0]["incidents"] == []
    gpu = classify_records(
        [
            LogRecord(
                "gpu", "INFO 10-20 00:02:12 [__init__.py:1] Automatically detected platform cuda."
            ),
            LogRecord("gpu", warn),
        ],
        CLF,
    )
    assert gpu[0]["incidents"][0]["category"] == "library_mismatch"
