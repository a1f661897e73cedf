"""A held fallback under a cascade (``IncidentBook.release``): when the first failure outcome
after an ``ERROR``-level fallback is a cascade that announces a traceback ("WorkerProc hit an
exception"), the fallback ranks as that cascade, so the traceback's own exception - read by
the text model when no signature knows it - takes the root cause; with nothing better after
the cascade the fallback stays the root cause. Lines: vLLM's attention-backend fallback at
ERROR (tests/test_outcome.py, vllm-project/vllm#13766) and a worker failing in CUDA-graph
capture on Ascend (vllm-project/vllm-ascend#2473)."""

from __future__ import annotations

from service.classify.engine import Classifier
from service.classify.rulebook import RuleBook
from service.offline.report import StreamReport, classify_records
from service.records import LogRecord
from tests.test_outcome import FA_FALLBACK, VLLM_UP, model

W = "(VllmWorker rank=0 pid=36105) ERROR 08-21 08:26:21 [multiproc_executor.py:546] "
CASCADE = f"{W}WorkerProc hit an exception."
TRACEBACK = [
    f"{W}Traceback (most recent call last):",
    f'{W}  File "/vllm-workspace/vllm-ascend/vllm_ascend/worker/model_runner_v1.py", line 2430, in capture_model',
    f"{W}    self._dummy_run(num_tokens)",
    f"{W}RuntimeError: operator():build/CMakeFiles/torch_npu.dir/compiler_depend.ts:47 NPU function "
    "error: c10_npu::acl::AclrtSynchronizeStreamWithTimeout(copy_stream), error code is 107027",
]
STARTING = VLLM_UP[: VLLM_UP.index(FA_FALLBACK) + 1]  # the fallback, before the server is up


def report(lines: list[str]) -> StreamReport:
    clf = Classifier(RuleBook(), text_model=model())
    return classify_records([LogRecord("s", t) for t in lines], clf)[0]


def test_the_exception_a_cascade_announces_takes_the_root_cause_from_a_held_fallback() -> None:
    (inc,) = report(STARTING + [CASCADE, *TRACEBACK])["incidents"]
    assert inc["line"] == TRACEBACK[-1]
    assert FA_FALLBACK in [r["line"] for r in inc["related"]]


def test_with_nothing_after_the_cascade_the_fallback_stays_the_root_cause() -> None:
    (inc,) = report(STARTING + [CASCADE])["incidents"]
    assert inc["line"] == FA_FALLBACK
