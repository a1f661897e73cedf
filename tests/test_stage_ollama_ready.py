"""ollama's "llama runner started in N seconds" (llm/server.go ``WaitUntilRunning``, printed once
the runner answers) is the ready marker of an ollama stream (``rules/stages.yaml`` ``ready:``):
a runner crash after it - a native assert while the first request is computed, SIGABRT, the Go
goroutine dump - is a request's failure, ``serving``, not the context set-up's. Lines from
ollama/ollama#10411 (gemma3 in docker, the assert right after the runner started; its stack in
ollama/ollama#10410 runs inside ``ollamarunner.(*Server).completion``)."""

from __future__ import annotations

from service.classify.engine import Classifier
from service.classify.rulebook import RuleBook
from service.offline.report import StreamReport, classify_records
from service.records import LogRecord

RB = RuleBook()
LOADED = [
    'time=2025-04-25T15:57:34.555Z level=WARN source=ggml.go:152 msg="key not found" '
    "key=tokenizer.ggml.add_eot_token default=false",
    'time=2025-04-25T15:57:38.031Z level=INFO source=ggml.go:556 msg="compute graph" backend=CPU '
    'buffer_type=CPU size="634.0 MiB"',
]
STARTED = 'time=2025-04-25T15:57:38.186Z level=INFO source=server.go:619 msg="llama runner started in 6.32 seconds"'
# the Go runtime's report of the abort that follows (ollama/ollama#9509)
ASSERT = ["ggml-alloc.c:819: GGML_ASSERT(talloc->buffer_id >= 0) failed", "SIGABRT: abort"]


def report(lines: list[str]) -> StreamReport:
    return classify_records([LogRecord("s", t) for t in lines], Classifier(RB))[0]


def test_a_runner_crash_after_the_runner_started_is_serving() -> None:
    (inc,) = report([*LOADED, STARTED, *ASSERT])["incidents"]
    assert inc["stage"] == "serving"


def test_the_same_crash_before_the_runner_started_is_not_serving() -> None:
    (inc,) = report([*LOADED, *ASSERT])["incidents"]
    assert inc["stage"] != "serving"
