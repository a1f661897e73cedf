"""The families of rules/signatures/gpu_sharing.yaml and foreign_formats.yaml in whole logs:
what the primary incident says when a GPU-sharing layer, a C++ runtime's uncaught exception,
a library built for another Python or NVSHMEM's IBGDA transport fails."""

from __future__ import annotations

import pytest

from service.classify.engine import Classifier
from service.offline.report import classify_records
from service.parse import line as L
from service.records import LogRecord

VLLM_TO_PROFILING = [
    "INFO 03-02 10:00:00 [__init__.py:1] Automatically detected platform cuda.",
    "INFO 03-02 10:00:05 [gpu_model_runner.py:1] Starting to load model Qwen/Qwen3-8B...",
    "INFO 03-02 10:00:30 [gpu_model_runner.py:1] Model loading took 15.2 GiB and 20.1 seconds",
]


def primary(lines: list[str]) -> tuple[str, str]:
    reports = classify_records((LogRecord(stream="s", text=t) for t in lines), Classifier())
    crit = [i for i in reports[0]["incidents"] if i["severity"] == "critical"]
    assert crit, "no incident"
    return crit[0]["category"], crit[0]["stage"]


def test_a_vgpu_quota_refusal_while_profiling_is_the_kv_cache_oom() -> None:
    log = [
        *VLLM_TO_PROFILING,
        "[HAMI-core ERROR (pid:88 thread=140001 allocator.c:53)]: Device 0 OOM 25769803776 / 24696061952",
        "(EngineCore_DP0 pid=88) ERROR 03-02 10:00:31 [core.py:708] torch.OutOfMemoryError: CUDA out of memory.",
    ]
    assert primary(log) == ("oom_kv_cache", "kv_cache_init")


def test_a_sharing_layer_fault_in_nccl_setup_is_the_layer_not_nccl() -> None:
    log = [
        VLLM_TO_PROFILING[0],
        "(VllmWorker rank=0 pid=241) INFO 07-11 16:55:09 [pynccl.py:69] vLLM is using nccl==2.26.2",
        "[HAMI-core ERROR (pid:241 thread=1402 multiprocess_memory_limit.c:831)]: Illegal device id: 850725928",
        "!!!!!!! Segfault encountered !!!!!!!",
    ]
    assert primary(log)[0] == "library_mismatch"


def test_a_cpp_runtime_uncaught_exception_is_placed_by_its_what_text() -> None:
    log = [
        "[TensorRT-LLM][INFO] Engine version 0.9.0 found in the config file",
        "terminate called after throwing an instance of 'tensorrt_llm::common::TllmException'",
        "  what():  [TensorRT-LLM][ERROR] CUDA runtime error in cudaMemcpyAsync(a, b, c): no kernel "
        "image is available for execution on the device (/src/cpp/tensorrt_llm/runtime/x.cu:120)",
        "Aborted (core dumped)",
    ]
    assert primary(log)[0] == "arch_unsupported"


@pytest.mark.parametrize(
    "text",
    [
        "  what():  CUDA error: no kernel image is available for execution on the device",
        "what():  std::bad_alloc",
    ],
)
def test_a_what_line_is_a_failure_line_not_source_code(text: str) -> None:
    line = L.parse_line(text)
    assert (line.kind, line.level) == (L.PLAIN, "ERROR")
    assert line.message.startswith("what():")


def test_an_indented_source_line_stays_code() -> None:
    assert L.parse_line("    what = compute(x)").kind == L.CODE


def test_a_library_built_for_another_python_at_warmup() -> None:
    log = [
        *VLLM_TO_PROFILING,
        "INFO 03-02 10:00:31 [gpu_worker.py:1] Memory profiling takes 3.1 seconds",
        "(EngineCore_DP0 pid=7) ERROR 03-02 10:00:32 [core.py:708] TypeError: unsupported "
        "operand type(s) for |: 'type' and 'NoneType'",
    ]
    assert primary(log) == ("library_mismatch", "kv_cache_init")


def test_nvshmem_ibgda_without_peer_memory_is_rdma_registration() -> None:
    log = [
        VLLM_TO_PROFILING[0],
        "/opt/nvshmem/src/modules/transport/ibgda/ibgda.cpp:4559: neither nv_peer_mem, or "
        "nvidia_peermem detected. Skipping transport.",
        "/opt/nvshmem/src/host/transport/transport.cpp:nvshmemi_transport_init:282: init failed "
        "for transport: IBGDA",
    ]
    assert primary(log)[0] == "mlx5_registration"
