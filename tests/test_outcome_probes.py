"""A signature that says ``fatal: false`` (a known probe or notice) waits for the run's outcome
and, when the run then fails, gives the root cause to the failure (``outcome.yields``).
bitsandbytes' import-time notice that it loaded its CPU library
(bitsandbytes-foundation/bitsandbytes#680: the ``compiled without GPU support`` UserWarning and
the missing GPU symbol) before a server that starts (tests/test_outcome.py's vLLM start-up) or
a process the kernel kills while loading checkpoint shards (``Killed``)."""

from __future__ import annotations

from service.classify.engine import Classifier
from service.classify.rulebook import RuleBook
from service.offline.report import StreamReport, classify_records
from service.records import LogRecord
from tests.test_outcome import VLLM_UP

SITE = "/opt/conda/envs/py31/lib/python3.10/site-packages/bitsandbytes"
BNB = [
    f"{SITE}/cextension.py:34: UserWarning: The installed version of bitsandbytes was compiled "
    "without GPU support. 8-bit optimizers, 8-bit multiplication, and GPU quantization are "
    "unavailable.",
    '  warn("The installed version of bitsandbytes was compiled without GPU support. "',
    f"{SITE}/libbitsandbytes_cpu.so: undefined symbol: cadam32bit_grad_fp32",
]
KILLED = [
    "Loading checkpoint shards:   0%|          | 0/2 [00:00<?, ?it/s]",
    "Killed",
]


def report(lines: list[str]) -> StreamReport:
    return classify_records([LogRecord("s", t) for t in lines], Classifier(RuleBook()))[0]


def test_the_bitsandbytes_cpu_notice_before_a_server_that_starts_never_pages() -> None:
    rep = report(BNB + VLLM_UP)
    assert rep["incidents"] == []
    assert {w["rule"] for w in rep["warnings"]} == {"bitsandbytes-cpu-build"}


def test_the_same_notice_before_a_kill_gives_the_root_cause_to_the_kill() -> None:
    (inc,) = report(BNB + KILLED)["incidents"]
    assert (inc["category"], inc["line"]) == ("host_memory", "Killed")
    assert "bitsandbytes-cpu-build" in [r["rule"] for r in inc["related"]]
