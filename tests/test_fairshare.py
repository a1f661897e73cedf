"""One stream cannot starve another (#27): the classifier's worker runs the slices of the
streams that used it least first (service/fairshare.py). Ordering only, never timing: a
flood on stream A and a real failure on stream B are submitted together, and B's batch is
committed - its incident paged from the outbox - while A's backlog is still waiting; A is
slowed and counted, never dropped."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import yaml

from service import metrics
from service.fairshare import SLICE_CHARS, SLICE_RECORDS, FairShare, Part, slices
from service.records import LogRecord, Position
from service.store import Store
from tests.test_store import REAL, kafka_records, pipeline

pytest_plugins = ("tests.test_store",)  # db_url / store fixtures
RULES = Path(__file__).resolve().parents[1] / "rules" / "signatures"


def dense_lines(n: int) -> list[str]:
    """``n`` lines of 8 KiB made of the rule book's own positive examples."""
    words = [
        str(x)
        for path in sorted(RULES.glob("*.yaml"))
        for sig in yaml.safe_load(path.read_text()).get("signatures", [])
        for x in (sig.get("examples") or {}).get("match", [])
    ]
    out = []
    for i in range(n):
        line, k = "", i
        while len(line) < 8192:
            line += words[k % len(words)] + " "
            k += 1
        out.append(line[:8192])
    return out


def test_a_batch_is_cut_per_stream_in_order_and_kept_whole_when_order_matters() -> None:
    recs = [LogRecord(f"s{i % 3}", "x" * 100) for i in range(3 * SLICE_RECORDS + 3)]
    lanes = slices(recs)
    assert [len(lane) for lane in lanes] == [2, 2, 2]  # 513 records each: two slices
    assert all(r.stream == lane[0][0].stream for lane in lanes for cut in lane for r in cut)
    assert sorted(id(r) for lane in lanes for cut in lane for r in cut) == sorted(map(id, recs))
    big = [LogRecord("a", "y" * 8192) for _ in range(17)]
    assert [len(c) for c in slices(big)[0]] == [SLICE_CHARS // 8192] * 2 + [1]
    kafka = [LogRecord(f"s{i % 2}", "z", position=Position("kafka", "t:0", i)) for i in range(4)]
    assert slices(kafka) == [[kafka]]  # offsets advance in order: one lane


def test_the_lighter_stream_goes_before_the_heavier_one_s_backlog() -> None:
    fair: FairShare[str] = FairShare("test")
    ran: list[str] = []
    b_in = threading.Event()

    def a_part(n: int) -> str:
        if n == 0:
            b_in.wait(10)  # B arrives while A's first slice runs
        ran.append(f"a{n}")
        return "a"

    a = fair.submit([[Part(lambda n=n: a_part(n), ("A",), 1) for n in range(5)]])
    b = fair.submit([[Part(lambda: ran.append("b") or "b", ("B",), 1)]])
    b_in.set()
    assert b.result(10) == ["b"] and a.result(10) == ["a"] * 5
    assert ran == ["a0", "b", "a1", "a2", "a3", "a4"]
    fair.close()


def test_b_s_real_failure_is_committed_before_a_s_flood_is_done(store: Store) -> None:
    p = pipeline(store)
    flood = [LogRecord("llm-a/a-0/vllm", line) for line in dense_lines(3 * SLICE_CHARS // 8192)]
    failure = kafka_records(REAL / "bad-dtype.cri.log", stream="llm-b/b-0/vllm")
    for r in failure:
        r.position = None
    seen_at_b: dict[str, int] = {}

    async def go() -> None:
        with p._lock:  # noqa: SLF001 - A's first slice waits until B is queued too
            a = asyncio.ensure_future(p.submit(flood, "http"))
            await asyncio.sleep(0)
            b = asyncio.ensure_future(p.submit(failure, "http"))
            await asyncio.sleep(0)
        await b
        a_state = store.stream("llm-a/a-0/vllm")
        seen_at_b["a_lines"] = 0 if a_state is None else a_state["lines"]
        seen_at_b["b_incidents"] = len(store.list_incidents(stream="llm-b/b-0/vllm")[0])
        await a

    asyncio.run(go())
    assert seen_at_b["b_incidents"] == 1  # B's incident (and its outbox event) is stored
    assert seen_at_b["a_lines"] < len(flood)  # while A's backlog waits
    assert store.stream("llm-a/a-0/vllm")["lines"] == len(flood)  # A slowed, never dropped
    p.close()


def test_heavy_slices_that_waited_are_counted() -> None:
    clock = [0.0]
    fair: FairShare[int] = FairShare("count", clock=lambda: clock[0])
    before = metrics.REGISTRY.get_sample_value(
        "sentinel_pipeline_slowed_records_total", {"source": "flood"}
    )
    gate = threading.Event()

    def first() -> int:
        gate.wait(10)
        clock[0] += 5.0  # the first slice took 5 s: the next one waited that long
        return 0

    job = fair.submit([[Part(first, ("A",), 7, "flood"), Part(lambda: 1, ("A",), 9, "flood")]])
    gate.set()
    assert sorted(job.result(10)) == [0, 1]
    after = metrics.REGISTRY.get_sample_value(
        "sentinel_pipeline_slowed_records_total", {"source": "flood"}
    )
    assert (after or 0) - (before or 0) == 9
    fair.close()
