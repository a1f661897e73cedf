"""A CUDA library's absence is start-up noise only where the platform has no CUDA by design
(the stream's ``platform`` fact, ``quiet_on`` in rules/signatures): vLLM with an out-of-tree
platform plugin (AWS Neuron) warns that libcuda.so.1 cannot be opened; on CUDA the same
line means the driver libraries were not mounted. The platform is the machine's: a restart
keeps it."""

from __future__ import annotations

import itertools

from service.classify.loader import build_classifier
from service.offline.report import classify_records
from service.records import LogRecord

CLF = build_classifier()
_N = itertools.count()
WARN = (
    "(APIServer pid=77) WARNING 03-02 10:00:05 [interface.py:201] Failed to import from "
    "vllm._C: ImportError('libcuda.so.1: cannot open shared object file: No such file or "
    "directory')"
)
NEURON = "INFO 03-02 10:00:01 [__init__.py:220] Platform plugin neuron is activated"
CUDA = "INFO 03-02 10:00:01 [__init__.py:241] Automatically detected platform cuda."


def categories(*lines: str) -> list[str]:
    name = f"p{next(_N)}"
    reps = classify_records([LogRecord(name, t) for t in lines], CLF)
    return [i["category"] for i in reps[0]["incidents"]]


def test_libcuda_missing_is_noise_on_a_non_cuda_platform_only() -> None:
    assert categories(NEURON, WARN) == []
    assert categories(CUDA, WARN)[:1] == ["gpu_not_visible"]


def test_a_restart_keeps_the_platform() -> None:
    restart = WARN.replace("pid=77", "pid=91")  # a new API server: the next run
    assert categories(NEURON, WARN, "KeyError: 'w'", restart) == ["unknown"]
