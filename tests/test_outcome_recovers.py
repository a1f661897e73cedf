"""A page needs an outcome, extended (``classify/judgements/outcome.py``, block ``outcome``
``recovers`` of ``rules/judgements.yaml``): a line whose own words say its program recovers
(it retries, falls back, or a library's allocator hands the failure to its caller) and an
exception logged inside a notice-level record (a caught probe) wait for the run's outcome
like a library's WARN. A run that goes on makes them warnings; a run that then fails pages
with them, the recovered-from failure ranked as the cause. Lines are real public wordings:
llama.cpp's KV-slot retry and its final failure (ggml-org/llama.cpp#14097, ggml-org/llama.cpp#4185,
ikawrakow/ik_llama.cpp#1619), ggml's allocator failing while weights load
(ggml-org/llama.cpp#20431), vLLM's optional-import probe logged at WARNING with its traceback
(vllm ``utils/import_utils.py`` ``_has_module``), SGLang going on without a model's
``generation_config.json`` (SGLang ``srt/utils/hf_transformers_utils.py``
``get_generation_config``, as its CI logs print it for BAAI/bge-reranker-v2-m3)."""

from __future__ import annotations

import pytest

from service.classify.engine import Classifier
from service.classify.judgements import outcome
from service.classify.rulebook import RuleBook
from service.incidents.finding import Finding
from service.offline.report import StreamReport, classify_records
from service.parse.line import parse_line
from service.records import LogRecord

RB = RuleBook()
RECOVERS = RB.judgements.get(outcome.KIND).recovering()

LLAMA_UP = [
    "llama_model_loader: loaded meta data with 40 key-value pairs and 444 tensors from /m/gemma-3-12b-it-Q4_K_M.gguf",
    "llama_context: n_ctx         = 8192",
    "main: server is listening on http://127.0.0.1:8080 - starting the main loop",
    "srv  update_slots: all slots are idle",
    "slot launch_slot_: id  0 | task 0 | processing task",
]
RETRIES = [  # ggml-org/llama.cpp#14097
    "decode: failed to find a memory slot for batch of size 1024",
    "srv  update_slots: failed to find free space in the KV cache, retrying with smaller batch size, i = 0, n_batch = 512, ret = 1",
    "decode: failed to find a memory slot for batch of size 512",
    "srv  update_slots: failed to find free space in the KV cache, retrying with smaller batch size, i = 0, n_batch = 256, ret = 1",
]
SERVED = [
    "slot      release: id  0 | task 0 | stop processing: n_past = 1803, truncated = 0",
    "srv  log_server_r: request: POST /v1/chat/completions 127.0.0.1 200",
    "srv  update_slots: all slots are idle",
]
OLD_RETRIES = [  # ggml-org/llama.cpp#4185 (the server of late 2023)
    "update_slots : failed to find free space in the KV cache, retrying with smaller n_batch = 2",
    "update_slots : failed to find free space in the KV cache, retrying with smaller n_batch = 1",
]
GAVE_UP_OLD = "update_slots : failed to decode the batch, n_batch = 1, ret = 1"  # llama.cpp#4185
GAVE_UP = (  # ikawrakow/ik_llama.cpp#1619
    "ERR [    process_batch_tokens] failed to decode the batch: KV cache is full - try increasing "
    'it via the context size | tid="135692713889792" timestamp=1775920954 i=0 n_batch=1 ret=1'
)
WEIGHTS_OOM = [  # ggml-org/llama.cpp#20431
    "load_tensors: loading model tensors, this can take a while... (mmap = true, direct_io = false)",
    "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 144817.04 MiB on device 0: cudaMalloc failed: out of memory",
    "alloc_tensor_range: failed to allocate CUDA0 buffer of size 151851674624",
    "llama_model_load: error loading model: unable to allocate CUDA0 buffer",
]
P = "(EngineCore_DP0 pid=412) WARNING 09-02 11:04:51 [import_utils.py:408] "
PROBE = [  # vLLM's _has_module logs a failed optional import with its traceback, at WARNING
    f"{P}Module vllm.third_party.deep_gemm was found but failed to import",
    f"{P}Traceback (most recent call last):",
    f'{P}  File "/usr/local/lib/python3.12/dist-packages/vllm/utils/import_utils.py", line 406, in _has_module',
    f"{P}    importlib.import_module(module_name)",
    f"{P}ImportError: libcuda.so.1: cannot open shared object file: No such file or directory",
]
V = "(EngineCore_DP0 pid=412) INFO 09-02 11:05:40 "
VLLM_ON = [
    f"{V}[gpu_model_runner.py:2602] Starting to load model Qwen/Qwen3-8B...",
    f"{V}[default_loader.py:267] Loading weights took 3.32 seconds",
    f"{V}[kv_cache_utils.py:1087] GPU KV cache size: 250,480 tokens",
    "(APIServer pid=1) INFO 09-02 11:06:02 [api_server.py:1971] Starting vLLM API server 0 on http://0.0.0.0:8000",
    "(APIServer pid=1) INFO:     Application startup complete.",
]
VLLM_DIES = [
    f"{V}[gpu_model_runner.py:2602] Starting to load model Qwen/Qwen3-8B...",
    "(EngineCore_DP0 pid=412) ERROR 09-02 11:05:41 [core.py:708] RuntimeError: CUDA error: "
    "no kernel image is available for execution on the device",
]
SGLANG = [
    "[2026-05-04 04:04:17] Failed to load generation config for BAAI/bge-reranker-v2-m3: "
    "BAAI/bge-reranker-v2-m3 does not appear to have a file named generation_config.json. "
    "Checkout 'https://huggingface.co/BAAI/bge-reranker-v2-m3/tree/main' for available files.. "
    "Proceeding without generation config.",
    "[2026-05-04 04:04:21] Load weight begin. avail mem=78.50 GB",
    "[2026-05-04 04:04:40] INFO:     Application startup complete.",
    "[2026-05-04 04:04:41] The server is fired up and ready to roll!",
]


def report(lines: list[str]) -> StreamReport:
    return classify_records([LogRecord("s", t) for t in lines], Classifier(RB))[0]


def test_the_recovering_wordings_are_read_from_the_rules() -> None:
    assert RECOVERS is not None
    for line in (RETRIES[1], OLD_RETRIES[0], WEIGHTS_OOM[1], "NCCL INFO falling back to sockets"):
        assert RECOVERS.search(parse_line(line).message), line
    for line in (GAVE_UP, GAVE_UP_OLD, WEIGHTS_OOM[3], SERVED[1], "Retry-After: 3"):
        assert not RECOVERS.search(parse_line(line).message), line


def test_a_recovering_line_waits_and_does_not_give_away_the_root_cause() -> None:
    line = parse_line(RETRIES[1])
    f = Finding("capacity", "oom_runtime", "serving", 0.9, "signature", "x", line.text)
    sig = RB.signature("engine-kv-pool-exhausted")
    assert not outcome.needs_outcome(f, line, sig)  # unlevelled: fatal at once ...
    assert outcome.needs_outcome(f, line, sig, recovering=True)  # ... unless it says it retries
    assert not outcome.yields(f, line, sig, recovering=True)
    assert outcome.yields(f, line, None, recovering=True)  # a model's guess still yields


@pytest.mark.parametrize("retries", [RETRIES, OLD_RETRIES], ids=["b5xxx", "2023"])
def test_llama_cpp_kv_slot_retries_in_a_server_that_goes_on_never_page(
    retries: list[str],
) -> None:
    rep = report(LLAMA_UP + retries + SERVED)
    assert rep["incidents"] == []
    assert {w["category"] for w in rep["warnings"]} == {"oom_runtime"}
    assert all("the run went on" in (w["detail"] or "") for w in rep["warnings"])


@pytest.mark.parametrize("gave_up", [GAVE_UP, GAVE_UP_OLD], ids=["ik", "2023"])
def test_retries_that_end_in_a_failed_request_page_as_a_full_kv_pool(gave_up: str) -> None:
    rep = report(LLAMA_UP + OLD_RETRIES + [gave_up])
    (inc,) = rep["incidents"]
    assert (inc["category"], inc["stage"], inc["rule"]) == (
        "oom_runtime",
        "serving",
        "engine-kv-pool-exhausted",
    )


def test_an_allocation_its_caller_could_not_recover_from_pages_as_the_cause() -> None:
    (inc,) = report(WEIGHTS_OOM)["incidents"]
    assert (inc["category"], inc["stage"]) == ("oom_weights", "model_load")
    assert inc["line"] == WEIGHTS_OOM[1]


def test_a_probe_traceback_logged_at_warning_in_a_start_up_that_goes_on_never_pages() -> None:
    rep = report(PROBE + VLLM_ON)
    assert rep["incidents"] == []
    assert rep["warnings"]


def test_the_same_probe_before_a_death_pages_with_the_death_as_the_cause() -> None:
    (inc,) = report(PROBE + VLLM_DIES)["incidents"]
    assert inc["category"] == "arch_unsupported"


def test_an_engine_going_on_without_an_optional_file_never_pages() -> None:
    rep = report(SGLANG)
    assert rep["incidents"] == []
    assert [w["category"] for w in rep["warnings"]] == ["model_unavailable"]
