"""The classifier core on realistic streams: stages, root cause precedence, cascades,
orderly shutdown, restarts, facts. Lines are real vLLM / torch / NCCL wordings."""

from __future__ import annotations

from service.classify.engine import Classifier
from service.classify.rulebook import RuleBook
from service.classify.stream_state import StreamState
from service.offline.report import classify_records
from service.records import LogRecord

HEALTHY_V1 = """\
(APIServer pid=1) INFO 07-21 04:58:40 [__init__.py:216] Automatically detected platform cuda.
(APIServer pid=1) INFO 07-21 04:58:41 [api_server.py:1896] vLLM API server version 0.10.1.1
(APIServer pid=1) INFO 07-21 04:58:41 [utils.py:326] non-default args: {'model': 'Qwen/Qwen3-8B', 'tensor_parallel_size': 2, 'max_model_len': 32768, 'enable_prefix_caching': True}
(APIServer pid=1) WARNING 07-21 04:58:41 [envs.py:1] Unknown vLLM environment variable detected: VLLM_QWEN_SVC_PORT
(APIServer pid=1) INFO 07-21 04:58:45 [config.py:1604] Using max model len 32768
(EngineCore_0 pid=60) INFO 07-21 04:58:50 [core.py:654] Initializing a V1 LLM engine (v0.10.1.1) with config: model='Qwen/Qwen3-8B', dtype=torch.bfloat16, max_seq_len=32768, tensor_parallel_size=2, pipeline_parallel_size=1, enable_prefix_caching=True
(EngineCore_0 pid=60) WARNING 07-21 04:58:50 [multiproc_worker_utils.py:273] Reducing Torch parallelism from 32 threads to 1 to avoid unnecessary CPU contention.
(VllmWorker rank=0 pid=70) INFO 07-21 04:58:55 [pynccl.py:70] vLLM is using nccl==2.26.2
(VllmWorker rank=1 pid=71) WARNING 07-21 04:58:56 [custom_all_reduce.py:136] Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs. To silence this warning, specify disable_custom_all_reduce=True explicitly.
(VllmWorker rank=0 pid=70) WARNING 07-21 04:58:56 [utils.py:1] NCCL_CUMEM_ENABLE is set to 0, skipping override. This may increase memory overhead with cudagraph+allreduce: https://github.com/NVIDIA/nccl/issues/1234
(VllmWorker rank=0 pid=70) WARNING 07-21 04:58:57 [topk_topp_sampler.py:61] FlashInfer is not available. Falling back to the PyTorch-native implementation of top-p & top-k sampling.
(VllmWorker rank=0 pid=70) INFO 07-21 04:58:58 [gpu_model_runner.py:1913] Starting to load model Qwen/Qwen3-8B...
(VllmWorker rank=0 pid=70) WARNING 07-21 04:58:58 [utils.py:1] `torch_dtype` is deprecated! Use `dtype` instead!
(VllmWorker rank=0 pid=70) INFO 07-21 04:59:30 [gpu_model_runner.py:1946] Model loading took 7.6 GiB and 31.2 seconds
(VllmWorker rank=0 pid=70) WARNING 07-21 04:59:31 [utils.py:1] Not enough SMs to use max_autotune_gemm mode
(VllmWorker rank=0 pid=70) INFO 07-21 04:59:40 [monitor.py:34] torch.compile takes 9.1 s in total
(VllmWorker rank=0 pid=70) INFO 07-21 04:59:42 [gpu_worker.py:276] Available KV cache memory: 55.2 GiB
(EngineCore_0 pid=60) INFO 07-21 04:59:42 [kv_cache_utils.py:849] GPU KV cache size: 803,888 tokens
(EngineCore_0 pid=60) INFO 07-21 04:59:42 [kv_cache_utils.py:853] Maximum concurrency for 32,768 tokens per request: 24.53x
(VllmWorker rank=0 pid=70) WARNING 07-21 04:59:43 [model_runner.py:1] CUDA graphs can take additional 1~3 GiB memory per GPU. If you are running out of memory, consider decreasing `gpu_memory_utilization` or switching to eager mode.
(EngineCore_0 pid=60) INFO 07-21 04:59:50 [core.py:215] init engine (profile, create kv cache, warmup model) took 52.30 seconds
(APIServer pid=1) INFO 07-21 04:59:52 [api_server.py:1971] Starting vLLM API server 0 on http://0.0.0.0:8000
(APIServer pid=1) INFO 07-21 04:59:52 [launcher.py:37] Available routes are:
(APIServer pid=1) INFO:     Started server process [1]
(APIServer pid=1) INFO:     Waiting for application startup.
(APIServer pid=1) INFO:     Application startup complete.
(APIServer pid=1) INFO:     10.0.0.7:54182 - "POST /v1/chat/completions HTTP/1.1" 200 OK
(APIServer pid=1) INFO 07-21 05:00:10 [loggers.py:123] Engine 000: Avg prompt throughput: 120.0 tokens/s, Avg generation throughput: 35.1 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.1%, Prefix cache hit rate: 40.0%
"""

STARTUP = "\n".join(HEALTHY_V1.splitlines()[:6]) + "\n"


def classify(text: str, stream: str = "s", times: bool = False) -> dict:
    recs = [
        LogRecord(stream=stream, text=t, time=(1000.0 + i if times else None))
        for i, t in enumerate(text.splitlines())
    ]
    return classify_records(recs, Classifier(RB))[0]


RB = RuleBook()


def primary(rep: dict) -> dict:
    crit = [i for i in rep["incidents"] if i["severity"] == "critical"]
    assert crit, rep
    return crit[0]


def test_healthy_startup_with_scary_warnings_has_no_incident() -> None:
    rep = classify(HEALTHY_V1)
    assert rep["incidents"] == []
    assert rep["status"] == "serving"
    assert rep["stage"] == "serving"
    assert list(rep["timeline"]) == [
        "cuda_init",
        "distributed_init",
        "model_load",
        "kv_cache_init",
        "api_server",
        "serving",
    ]


def test_facts_are_collected() -> None:
    facts = classify(HEALTHY_V1)["facts"]
    assert facts["vllm_version"] == "0.10.1.1"
    assert facts["model"] == "Qwen/Qwen3-8B"
    assert facts["tensor_parallel_size"] == "2"
    assert facts["enable_prefix_caching"] == "True"
    assert facts["nccl_version"] == "2.26.2"


def test_mlx5_evidence_beats_the_generic_nccl_error_it_explains() -> None:
    log = (
        STARTUP
        + """\
(VllmWorker rank=1 pid=71) ERROR 07-21 04:58:56 [multiproc_executor.py:470] WorkerProc failed to start.
(VllmWorker rank=1 pid=71) ERROR 07-21 04:58:56 [multiproc_executor.py:470] Traceback (most recent call last):
(VllmWorker rank=1 pid=71) ERROR 07-21 04:58:56 [multiproc_executor.py:470]   File "/usr/local/lib/python3.12/dist-packages/vllm/distributed/device_communicators/pynccl.py", line 99, in __init__
(VllmWorker rank=1 pid=71) ERROR 07-21 04:58:56 [multiproc_executor.py:470] RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)
node-1:71:305 [1] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0
node-1:71:305 [1] misc/ibvwrap.cc:190 NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory
(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""
    )
    p = primary(classify(log))
    assert (p["tier"], p["category"], p["stage"]) == (
        "integration",
        "mlx5_registration",
        "distributed_init",
    )
    assert {r["category"] for r in p["related"]} >= {"nccl_error", "unknown"}


def test_dev_shm_exhaustion_is_host_memory_not_nccl() -> None:
    log = (
        STARTUP
        + """\
[2025-06-06 09:52:01] host:15016:15201 [1] misc/shmutils.cc:87 NCCL WARN Error: failed to extend /dev/shm/nccl-YrFC5V to 33030532 bytes, error: No space left on device (28)
(VllmWorker rank=1 pid=71) ERROR 07-21 04:58:56 [multiproc_executor.py:470] RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)
"""
    )
    p = primary(classify(log))
    assert (p["tier"], p["category"]) == ("capacity", "host_memory")


def test_driver_too_old_beats_the_no_gpu_symptom_it_causes() -> None:
    log = """\
INFO 03-12 14:55:20 [__init__.py:239] Automatically detected platform cuda.
ERROR 03-12 14:55:27 [core.py:390] RuntimeError: No CUDA GPUs are available
/usr/local/lib/python3.12/dist-packages/torch/cuda/__init__.py:174: UserWarning: CUDA initialization: The NVIDIA driver on your system is too old (found version 12080). Please update your GPU driver by downloading and installing a new version from the URL: http://www.nvidia.com/Download/index.aspx
"""
    rep = classify(log)
    p = primary(rep)
    assert (p["category"], p["stage"]) == ("driver_incompatible", "cuda_init")
    assert rep["facts"]["driver_cuda"] == "12.8"


def test_compatibility_explanation_uses_image_and_driver_facts() -> None:
    recs = [
        LogRecord(
            "ns/pod/vllm",
            t,
            meta={
                "image": "vllm/vllm-openai:kimi-k3",
                "pod": "pod",
                "namespace": "ns",
                "container": "vllm",
            },
        )
        for t in [
            "INFO 07-27 10:00:00 [__init__.py:239] Automatically detected platform cuda.",
            "RuntimeError: The NVIDIA driver on your system is too old (found version 12090).",
        ]
    ]
    p = primary(classify_records(recs, Classifier(RB))[0])
    assert "image needs CUDA 13.0 (driver ≥ 580.65.06, r580+)" in p["explanation"]
    assert "host driver supports CUDA 12.9 (r575)" in p["explanation"]


def test_oom_category_follows_the_stage() -> None:
    oom = (
        "(VllmWorker rank=0 pid=70) ERROR 07-21 05:00:00 [multiproc_executor.py:470] "
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of 79.19 GiB of which 1.2 GiB is free."
    )
    lines = HEALTHY_V1.splitlines()
    at = {"model_load": 12, "kv_cache_init": 17, "serving": len(lines)}
    expect = {
        "model_load": "oom_weights",
        "kv_cache_init": "oom_kv_cache",
        "serving": "oom_runtime",
    }
    for stage, n in at.items():
        p = primary(classify("\n".join(lines[:n] + [oom])))
        assert (p["category"], p["stage"]) == (expect[stage], stage)


def test_oom_stage_comes_from_traceback_frames_in_a_partial_paste() -> None:
    log = """\
ERROR 05-20 20:54:32 [multiproc_executor.py:962] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 136.00 MiB.
ERROR 05-20 20:54:32 [multiproc_executor.py:962] Traceback (most recent call last):
ERROR 05-20 20:54:32 [multiproc_executor.py:962]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_worker.py", line 210, in determine_available_memory
ERROR 05-20 20:54:32 [multiproc_executor.py:962]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", line 2100, in profile_run
"""
    p = primary(classify(log))
    assert (p["category"], p["stage"]) == ("oom_kv_cache", "kv_cache_init")


def test_cascade_alone_is_an_unplaced_failure() -> None:
    p = primary(
        classify(
            "(APIServer pid=1) RuntimeError: Engine core initialization failed. "
            "See root cause above. Failed core proc(s): {}"
        )
    )
    assert (p["tier"], p["category"]) == ("other", "unknown")


def test_orderly_shutdown_noise_does_not_page() -> None:
    log = (
        HEALTHY_V1
        + """\
(APIServer pid=1) INFO 07-21 05:10:00 [launcher.py:99] [shutdown] API server: shutdown triggered
(EngineCore_0 pid=60) WARNING 07-21 05:10:01 [multiproc_executor.py:1] [shutdown] Executor: force killing workers
(APIServer pid=1) ERROR 07-21 05:10:01 [async_llm.py:480] AsyncLLM output_handler failed.
(APIServer pid=1) ERROR 07-21 05:10:01 [async_llm.py:480] Traceback (most recent call last):
(APIServer pid=1) ERROR 07-21 05:10:01 [async_llm.py:480] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.
(VllmWorker rank=0 pid=70) WARNING 07-21 05:10:01 [multiproc_executor.py:1] WorkerProc was terminated
(APIServer pid=1) INFO:     Application shutdown complete.
"""
    )
    rep = classify(log)
    assert rep["incidents"] == []
    assert rep["status"] == "stopped"


def test_engine_core_killed_while_serving_is_host_memory() -> None:
    log = HEALTHY_V1 + (
        "(APIServer pid=1) ERROR 07-21 05:10:00 [core_client.py:564] Engine core proc "
        "EngineCore_0 died unexpectedly, shutting down client.\n"
    )
    p = primary(classify(log))
    assert (p["category"], p["stage"]) == ("host_memory", "serving")


def test_restart_past_the_failing_stage_resolves_and_same_failure_counts_restarts() -> None:
    fail = STARTUP + (
        "(VllmWorker rank=0 pid=70) ERROR 07-21 04:58:56 [x.py:1] RuntimeError: NCCL "
        "error: unhandled system error (run with NCCL_DEBUG=INFO for details)\n"
    )
    rep = classify(fail + fail)
    (inc,) = rep["incidents"]
    assert inc["restarts"] == 1 and inc["status"] == "open"
    rep = classify(fail + HEALTHY_V1)
    (inc,) = rep["incidents"]
    assert inc["status"] == "resolved"
    assert rep["status"] == "serving"


def test_interleaved_ranks_keep_tracebacks_apart() -> None:
    log = (
        STARTUP
        + """\
(VllmWorker rank=0 pid=70) ERROR 07-21 04:59:00 [multiproc_executor.py:470] Traceback (most recent call last):
(VllmWorker rank=1 pid=71) ERROR 07-21 04:59:00 [multiproc_executor.py:470] Traceback (most recent call last):
(VllmWorker rank=0 pid=70) ERROR 07-21 04:59:00 [multiproc_executor.py:470]   File "/x/gpu_model_runner.py", line 1, in load_model
(VllmWorker rank=1 pid=71) ERROR 07-21 04:59:00 [multiproc_executor.py:470]   File "/x/gpu_worker.py", line 1, in determine_available_memory
(VllmWorker rank=1 pid=71) ERROR 07-21 04:59:00 [multiproc_executor.py:470] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB.
(VllmWorker rank=0 pid=70) ERROR 07-21 04:59:00 [multiproc_executor.py:470] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB.
"""
    )
    p = primary(classify(log))
    assert (p["category"], p["stage"]) == ("oom_kv_cache", "kv_cache_init")
    assert any(r["category"] == "oom_weights" and r["stage"] == "model_load" for r in p["related"])


def test_wrappers_ansi_and_nested_prefixes_are_understood() -> None:
    log = (
        "vllm-1  | 2026-02-03T10:11:12.123Z \x1b[0;36m(APIServer pid=1)\x1b[0;0m (EngineCore_DP0 pid=68) "
        "ERROR 02-03 10:11:12 [core.py:708] RuntimeError: Unexpected error from cudaGetDeviceCount(). "
        "Did you run some cuda functions before calling NumCudaDevices() that might have already set "
        "an error? Error 803: system has unsupported display driver / cuda driver combination\n"
    )
    p = primary(classify(log))
    assert (p["category"], p["rule"]) == ("driver_incompatible", "cuda-error-803-driver-mismatch")


def test_unmatched_exception_is_unknown_with_its_template() -> None:
    p = primary(classify(STARTUP + "FluxCapacitorError: overheated at 88 mph on node 10.1.2.3\n"))
    assert (p["category"], p["method"]) == ("unknown", "heuristic")
    assert "10.1.2.3" not in (p["template"] or "x")


def test_state_round_trips_through_json() -> None:
    clf = Classifier(RB)
    for t in STARTUP.splitlines():
        clf.feed(LogRecord("s", t))
    st = clf.state("s")
    copy = StreamState.from_dict(st.to_dict())
    assert copy.to_dict() == st.to_dict()
    clf2 = Classifier(RB)
    clf2.tracker.streams["s"] = StreamState.from_dict(st.to_dict())
    changes = clf2.feed(LogRecord("s", "RuntimeError: NCCL error: unhandled system error"))
    assert changes[0].kind == "opened"
    assert changes[0].incident.stage == "distributed_init"
