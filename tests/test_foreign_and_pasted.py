"""Failure lines of other programs and pasted logs reach the classifier: glog, dmesg,
container runtime, UCX, libfabric, NCCL transports; markdown quotes, table cells, bullets,
code fences, indented exceptions and tqdm residue never hide a marker."""

from __future__ import annotations

import itertools

import pytest

from service.classify.loader import build_classifier
from service.offline.report import classify_records
from service.parse.line import CODE, EMPTY, EXCEPTION, FRAME, TORCH, VLLM, parse_line
from service.records import LogRecord

CLF = build_classifier()
_STREAMS = itertools.count()


def primary(*lines: str) -> str | None:
    stream = f"s{next(_STREAMS)}"
    reps = classify_records([LogRecord(stream, t) for t in lines], CLF)
    incs = reps[0]["incidents"] if reps else []
    return f"{incs[0]['tier']}/{incs[0]['category']}" if incs else None


@pytest.mark.parametrize(
    "text, kind, message",
    [
        (
            "> (VllmWorker rank=1 pid=42) ERROR 01-01 00:00:00 [core.py:1] RuntimeError: x",
            EXCEPTION,
            "RuntimeError: x",
        ),
        ("| ERROR 01-01 00:00:00 [core.py:1] boom |", VLLM, "boom"),
        ("- `ERROR 01-01 00:00:00 [core.py:1] boom`", VLLM, "boom"),
        ("```log", EMPTY, ""),
        ('>   File "x.py", line 3, in f', FRAME, '  File "x.py", line 3, in f'),
        (
            "  RuntimeError: CUDA error: out of memory",
            EXCEPTION,
            "RuntimeError: CUDA error: out of memory",
        ),
        ("    INFO 01-01 00:00:00 [core.py:1] hello", VLLM, "hello"),
        (
            "E0415 08:39:57.117372  1234 rdma_context.cpp:123] Failed to register memory",
            TORCH,
            "Failed to register memory",
        ),
        (
            "Loading safetensors checkpoint shards: 100%|\u2588\u2588\u2588| 5/5 [00:10<00:00,  2.0s/it]"
            "Killed",
            None,
            "Killed",
        ),
        ("    raise RuntimeError(msg)", CODE, "    raise RuntimeError(msg)"),
        # journald in any locale: the month may be written "12\u6708"
        (
            "12\u6708 03 18:13:23 jetson ollama[3235]: ggml_gallocr_reserve_n: failed to allocate",
            None,
            "ggml_gallocr_reserve_n: failed to allocate",
        ),
        (
            "Dec 03 18:13:23 jetson ollama[3235]: llama_context: n_ctx = 4096",
            None,
            "llama_context: n_ctx = 4096",
        ),
        # PowerShell wraps a native program's stderr line: "<program>.exe : <line>"
        (
            "python.exe : [W817 17:26:55.000000000 socket.cpp:764] [c10d] The client socket "
            "has failed to connect to [host]:50756 (system error: 10049 - x).",
            TORCH,
            "[c10d] The client socket has failed to connect to [host]:50756 (system error: 10049 - x).",
        ),
        (
            "python.exe : ERROR 08-17 17:26:55 [core.py:1] boom",
            VLLM,
            "boom",
        ),
        # a Rich console: the level in its own column, the logger's file right-aligned
        (
            "[12/03/25 10:00:00] ERROR    Engine core initialization failed.        core.py:123",
            VLLM,
            "Engine core initialization failed.",
        ),
        (
            "                    ERROR    RuntimeError: boom                        core.py:12",
            EXCEPTION,
            "RuntimeError: boom",
        ),
    ],
)
def test_paste_decorations_and_foreign_headers(text: str, kind: str | None, message: str) -> None:
    line = parse_line(text)
    if kind is not None:
        assert line.kind == kind
    assert line.message == message
    assert line.text.strip() == text.strip()  # evidence shows the line as it came


def test_an_nvidia_smi_table_row_is_not_a_markdown_cell() -> None:
    row = "|   0  NVIDIA H100 80GB HBM3          On  |   00000000:18:00.0 Off |      0 |"
    assert parse_line(row).message == row


@pytest.mark.parametrize(
    "line, expected",
    [
        (
            "E0415 08:39:57.117372  1234 rdma_context.cpp:123] Failed to register memory "
            "0x7f0000000000: Bad address [14]",
            "integration/mlx5_registration",
        ),
        (
            "[1700000000.123456] [gpu-node-3:1234:0]          ib_md.c:293  UCX  ERROR ibv_reg_mr("
            "address=0x7f2a1c000000, length=1073741824, access=0xf) failed: Cannot allocate memory",
            "integration/mlx5_registration",
        ),
        (
            "libfabric:12345:1700000000::efa:mr:efa_mr_reg_impl():1000<warn> Unable to register MR: "
            "Cannot allocate memory",
            "integration/mlx5_registration",
        ),
        (
            "gpu-node-1:3456:3456 [0] NCCL WARN NET/OFI Unable to register memory (type = 2) for "
            "device 0. RC: -12, Error: Cannot allocate memory",
            "integration/mlx5_registration",
        ),
        (
            "nvidia-container-cli: initialization error: nvml error: driver not loaded: unknown.",
            "compatibility/gpu_not_visible",
        ),
        (
            "> torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a "
            "total capacity of 23.64 GiB of which 3.06 MiB is free.",
            "capacity/",
        ),
        (
            "| ERROR 01-01 00:00:00 [core.py:1] RuntimeError: NCCL error: unhandled system error "
            "(run with NCCL_DEBUG=INFO for details) |",
            "integration/nccl_error",
        ),
    ],
)
def test_failure_lines_of_any_format_open_an_incident(line: str, expected: str) -> None:
    got = primary(line)
    assert got is not None and got.startswith(expected), got


@pytest.mark.parametrize(
    "line",
    [
        "W1203 12:00:00.123456  1234 foo.cc:42] slow response from peer",
        "I1203 12:00:00.123456  1234 transfer_engine.cpp:42] Registered memory region 0x7f00",
        "Loading safetensors checkpoint shards: 100%|\u2588\u2588\u2588| 5/5 [00:10<00:00,  2.0s/it]",
        "> INFO 01-01 00:00:00 [api_server.py:1] Started server process [1]",
    ],
)
def test_healthy_foreign_and_pasted_lines_stay_quiet(line: str) -> None:
    assert primary(line) is None
