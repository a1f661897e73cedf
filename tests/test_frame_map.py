"""The stage from the code's own structure (issue #26): the frame map of rules/frames.yaml
(every entry exercised by its real frame line), the innermost frame of the engine's own
code deciding over the start-up markers, wrappers never hinting, the first block of a chain
deciding, a failure after the ready marker being a request's, and no ladder, report or
stream view showing a rung after the failure as reached. Real lines throughout: the
repository's own captures (tests/fixtures/real, tests/corpus, tests/blind)."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest

from service.classify.frames import Block, FrameMap, FrameStage
from service.classify.loader import build_classifier
from service.classify.rules import FrameEntry, Raised, load_frame_rules
from service.incidents.snapshots import StreamSnapshot, shown_reach
from service.offline.report import classify_records
from service.parse import line as L
from service.records import LogRecord
from service.taxonomy import STAGES, reach_before, reached_by
from service.ui.present import ladder

ROOT = Path(__file__).resolve().parent.parent
RULES = load_frame_rules()
MAP = FrameMap(RULES)
CLF = build_classifier()
_N = itertools.count()
SOURCE = re.compile(r"^(?:vllm|sglang|tgi) \d+\.\d+\.\d+ source\b")


def lines_of(rel: str) -> list[str]:
    return (ROOT / rel).read_text(encoding="utf-8").splitlines()


def report(lines: list[str]) -> Any:
    key = f"fm{next(_N)}"
    return classify_records([LogRecord(key, t) for t in lines], CLF)[0]


def in_file(text: str, rel: str) -> bool:
    """Whether ``text`` is in the repository file ``rel`` (as it is, or JSON-escaped)."""
    body = (ROOT / rel).read_text(encoding="utf-8")
    return text in body or json.dumps(text)[1:-1] in body


def root(rep: Any) -> Any:
    return next(i for i in rep["incidents"] if i["severity"] == "critical")


# ---- the map as data -----------------------------------------------------------------


@pytest.mark.parametrize("entry", RULES.frames, ids=[f"{e.func}@{e.stage}" for e in RULES.frames])
def test_every_frame_entry_is_exercised_by_its_real_frame_line(entry: FrameEntry) -> None:
    line = L.parse_line("  " + entry.example)
    assert line.kind == L.FRAME and line.func == entry.func, entry.example
    hint = MAP.stage_of(line.func, line.path)
    assert hint is not None and hint.stage == entry.stage, entry.example
    if SOURCE.match(entry.example_from) is None:  # a repository log: the line is in it
        assert in_file(entry.example, entry.example_from)


@pytest.mark.parametrize("raised", RULES.raised, ids=[r.stage for r in RULES.raised])
def test_every_raised_message_places_its_real_line(raised: Raised) -> None:
    assert MAP.raised_stage(raised.example) == raised.stage
    assert set(raised.raised_in) <= {e.func for e in RULES.frames} | {"init_device"}
    if SOURCE.match(raised.example_from) is None:
        assert in_file(raised.example, raised.example_from)


def test_wrappers_never_hint_and_generic_names_need_their_path() -> None:
    for w in RULES.wrappers:
        assert MAP.stage_of(w.func, "/usr/lib/python3/dist-packages/vllm/v1/x.py") is None
    # ``capture`` is a CUDA-graph runner's only under its own file
    assert MAP.stage_of("capture", "/x/sglang/srt/model_executor/cuda_graph_runner.py")
    assert MAP.stage_of("capture", "/x/myapp/camera.py") is None


def test_engine_frames_outrank_library_and_startup_outranks_serving() -> None:
    block = Block()
    block.add(FrameStage("serving", True))  # V0 profile_run -> execute_model
    block.add(FrameStage("cuda_init", False))  # torch's _lazy_init under it
    assert block.hint == "serving"
    block.add(FrameStage("kv_cache_init", True))
    assert block.hint == "kv_cache_init"
    block.add(FrameStage("serving", True))
    assert block.hint == "kv_cache_init"


# ---- the innermost engine frame decides --------------------------------------------------

GB10 = (
    "tests/blind/cases/blind-guardkit-gb10-qwen35-free-memory-below-utilization-sm121-warning.log"
)


def test_free_memory_check_in_init_device_is_cuda_init_after_the_ranks_line() -> None:
    lines = lines_of(GB10)
    rep = report(lines)
    inc = root(rep)
    assert (inc["category"], inc["stage"]) == ("oom_kv_cache", "cuda_init")
    # the ranks' line (distributed_init) was printed before the check failed: not reached
    assert "distributed_init" not in rep["timeline"] and rep["stage"] == "cuda_init"
    rungs = {r["stage"]: r["state"] for r in ladder(inc)}
    assert rungs["cuda_init"] == "failed" and rungs["distributed_init"] == "not-reached"


def test_without_its_frames_the_same_failure_follows_the_markers() -> None:
    """Negative: an engine-core failure line alone (no traceback, no message the map
    knows) stays where the stream's markers were."""
    lines = lines_of(GB10)
    lines = lines[: next(i for i, t in enumerate(lines) if "EngineCore failed to start" in t)]
    lines.append(
        "(EngineCore pid=134) ERROR 03-26 10:33:15 [core.py:1108] RuntimeError: CUDA error: "
        "an illegal memory access was encountered"
    )
    assert root(report(lines))["stage"] == "distributed_init"


def test_only_a_wrapper_frame_hints_nothing() -> None:
    """A traceback whose only engine frames are the executor's wrappers (``_init_executor``,
    ``wait_for_ready``) leaves the stage to the markers: the workers had loaded weights."""
    lines = lines_of("tests/fixtures/real/dev-shm-170m-tp2.log")
    inc = root(report(lines))
    assert (inc["category"], inc["stage"]) == ("host_memory", "model_load")


def test_startup_frames_outrank_the_serving_loop_around_them() -> None:
    """A V1 worker runs every start-up step inside its serving loop's RPC
    (``worker_busy_loop``): the profiling frames inside decide."""
    lines = lines_of(
        "tests/blind/cases/blind-dfch-llmops-journald-deepgemm-hyperconnection-sm120.log"
    )
    assert any("in worker_busy_loop" in t for t in lines)
    assert any("in profile_run" in t for t in lines)
    assert root(report(lines))["stage"] == "kv_cache_init"


def test_config_validation_error_is_cuda_init_and_reaches_nothing_later() -> None:
    rep = report(lines_of("tests/fixtures/real/bad-max-model-len-too-large.log"))
    inc = root(rep)
    assert (inc["category"], inc["stage"]) == ("config_error", "cuda_init")
    assert rep["stage"] == "cuda_init" and set(rep["timeline"]) <= {"cuda_init"}


def test_model_resolution_inside_argument_processing_is_model_load() -> None:
    inc = root(report(lines_of("tests/fixtures/real/model-unavailable-offline.log")))
    assert (inc["category"], inc["stage"]) == ("model_unavailable", "model_load")


# ---- chains: the block that raised first --------------------------------------------------


def test_chained_traceback_first_block_decides() -> None:
    """The failure recognised in the second block of a chain is placed by the block that
    raised first (``init_device``), not by the later block's frames; unchained, the second
    traceback is its own and its frames place it."""
    frame = '  File "/usr/local/lib/python3.12/dist-packages/vllm/{}", line 1, in {}'
    lines = [
        "Traceback (most recent call last):",
        frame.format("v1/worker/gpu_worker.py", "init_device"),
        "KeyError: 'CUDA_VISIBLE_DEVICES'",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        frame.format("v1/engine/core.py", "_initialize_kv_caches"),
        frame.format("v1/worker/gpu_worker.py", "determine_available_memory"),
        "RuntimeError: CUDA error: an illegal memory access was encountered",
    ]
    assert root(report(lines))["stage"] == "cuda_init"
    unchained = [t for t in lines if not t.startswith("During handling")]
    assert root(report(unchained))["stage"] == "kv_cache_init"


# ---- after the ready marker ---------------------------------------------------------------

HEAD16 = "tests/fixtures/real/unsupported-cpu-attention-head-dim-16.log"


def _until_ready(rel: str) -> list[str]:
    lines = lines_of(rel)
    return lines[: next(i for i, t in enumerate(lines) if "Application startup complete" in t) + 1]


def test_a_kernel_failure_on_the_first_request_after_ready_is_serving() -> None:
    failing = next(t for t in lines_of(HEAD16) if "RuntimeError: Unsupported CPU attention" in t)
    rep = report([*_until_ready(HEAD16), failing])  # the line alone: no request, no frame
    assert root(rep)["stage"] == "serving"


def test_a_port_bind_after_ready_stays_api_server() -> None:
    bind = next(t for t in lines_of("tests/fixtures/real/port-in-use.log") if "Errno 98" in t)
    assert root(report([*_until_ready(HEAD16), bind]))["stage"] == "api_server"


def test_the_same_failure_before_ready_follows_the_markers() -> None:
    """Negative: before the ready marker the line stays at the rung the stream reached."""
    lines = _until_ready(HEAD16)
    failing = next(t for t in lines_of(HEAD16) if "RuntimeError: Unsupported CPU attention" in t)
    rep = report([*lines[:-1], failing])
    assert root(rep)["stage"] == "api_server"


# ---- the ladder never shows a rung after the failure as reached --------------------------


def test_reached_by_and_reach_before_cut_at_the_failure() -> None:
    timeline = {"cuda_init": 1.0, "distributed_init": 2.0, "model_load": 3.0}
    assert reached_by(timeline, "cuda_init") == {"cuda_init": 1.0}
    assert reached_by(timeline, None) == timeline
    assert reach_before("model_load", "cuda_init") == "cuda_init"
    assert reach_before("cuda_init", "model_load") == "cuda_init"
    assert reach_before(None, "cuda_init") is None


def test_ladder_of_a_stored_incident_never_reads_reached_after_the_failed_rung() -> None:
    """An incident stored before the fix still carries the later rungs: not shown reached."""
    rungs = ladder(
        {
            "stage": "cuda_init",
            "status": "open",
            "timeline": {"cuda_init": 1.0, "distributed_init": 2.0, "model_load": 3.0},
        }
    )
    after = [r for r in rungs if STAGES.index(r["stage"]) > STAGES.index("cuda_init")]
    assert after and all(r["state"] == "not-reached" and r["at"] is None for r in after)


def test_stream_view_is_cut_at_its_runs_open_failure() -> None:
    snap = {
        "run": 1,
        "stage": "model_load",
        "timeline": {"cuda_init": 1.0, "distributed_init": 2.0, "model_load": 3.0},
        "incidents": [
            {"run": 1, "severity": "critical", "status": "open", "primary": {"stage": "cuda_init"}}
        ],
    }
    stage, timeline = shown_reach(snap)  # type: ignore[arg-type]
    assert (stage, timeline) == ("cuda_init", {"cuda_init": 1.0})
    # negative: a failure of an earlier run does not cut the current run
    earlier: StreamSnapshot = {**snap, "run": 2}  # type: ignore[typeddict-item]
    assert shown_reach(earlier) == ("model_load", snap["timeline"])
