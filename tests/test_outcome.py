"""A page needs an outcome (``classify/judgements/outcome.py``, docs/taxonomy.md "Which
findings page at once, and why"): a finding that is not fatal by itself pages only when the
run then fails; when the run goes on it is a warning. Offline the whole log decides; in the
service the timer does, after ``outcome.hold_s``. Lines are real wordings: the NCCL RAS bind
warning (a healthy A800 NCCL run printed it, then went on), NCCL's mlx5 ``dlvsym`` probe
(vllm-project/vllm#42750), vLLM's attention-backend fallback at ERROR
(vllm-project/vllm#13766; vllm ``fa_utils.py`` logs it, then picks another backend)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from service.classify.engine import Classifier
from service.classify.judgements import outcome
from service.classify.loader import load_text_model
from service.classify.rulebook import RuleBook
from service.classify.ruletest import load_rule_set
from service.classify.stream_state import StreamState
from service.incidents.incident import Change
from service.offline.report import StreamReport, classify_records
from service.records import LogRecord
from service.training.evaluate import Case, predict

RB = RuleBook()

RAS_BIND = "A800:6801:6839 [1] ras/client_support.cc:159 NCCL WARN Call to bind failed: Address already in use"
NCCL_START = [
    "A800:6801:6801 [0] NCCL INFO Bootstrap : Using eth0:10.42.0.17<0>",
    "A800:6801:6801 [0] NCCL INFO NCCL version 2.27.3+cuda12.9",
    "A800:6801:6838 [0] NCCL INFO ncclCommInitAll comm 0x55b99f28bf90 rank 0 nranks 2 cudaDev 0 "
    "nvmlDev 0 busId 52000 commId 0x2253366728668019 - Init START",
    RAS_BIND,
    "A800:6801:6839 [1] NCCL INFO RAS failed to establish a client listening socket at "
    "localhost:28028",
]
TRAINING = [
    "{'loss': 2.1034, 'grad_norm': 1.25, 'learning_rate': 4.9e-05, 'epoch': 0.12}",
    "{'loss': 1.8712, 'grad_norm': 0.98, 'learning_rate': 2.5e-05, 'epoch': 0.5}",
    "{'train_runtime': 812.4, 'train_samples_per_second': 63.01, 'train_steps_per_second': "
    "0.49, 'train_loss': 1.87, 'epoch': 1.0}",
]
DEATH = [
    "[rank0]: Traceback (most recent call last):",
    '[rank0]:   File "/workspace/train.py", line 88, in <module>',
    "[rank0]:     trainer.train()",
    "[rank0]: torch.distributed.DistBackendError: NCCL error in: "
    "/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, unhandled system error "
    "(run with NCCL_DEBUG=INFO for details), NCCL version 2.27.3",
]
DLVSYM = (
    "node1:100:100 [0] NCCL INFO dlvsym failed on mlx5dv_get_data_direct_sysfs_path - "
    "/usr/lib/x86_64-linux-gnu/libmlx5.so: undefined symbol: mlx5dv_get_data_direct_sysfs_path, "
    "version MLX5_1.25"
)
NCCL_TESTS = [
    "# nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: "
    "20 agg iters: 1 validation: 1 graph: 0",
    "node1:100:100 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
    DLVSYM,
    "node1:100:100 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.1<0>",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong",
    "     8589934592    2147483648     float     sum      -1  38120.1  225.34  394.34      0",
    "# Out of bounds values : 0 OK",
    "# Avg bus bandwidth    : 394.47",
]
P = "(EngineCore pid=589) "
FA_FALLBACK = (
    f"{P}ERROR 03-22 10:54:27 [fa_utils.py:145] Cannot use FA version 2 is not supported due to "
    "FA2 is only supported on devices with compute capability >= 8"
)
VLLM_UP = [
    "INFO 03-22 10:53:50 [__init__.py:239] Automatically detected platform cuda.",
    f"{P}INFO 03-22 10:54:07 [parallel_state.py:1400] world_size=1 rank=0 local_rank=0 "
    "distributed_init_method=tcp://172.17.0.2:60001 backend=nccl",
    f"{P}INFO 03-22 10:54:26 [gpu_model_runner.py:4493] Starting to load model zai-org/GLM-OCR...",
    FA_FALLBACK,
    f"{P}INFO 03-22 10:54:27 [mm_encoder_attention.py:230] Using AttentionBackendEnum.TORCH_SDPA "
    "for MMEncoderAttention.",
    f"{P}INFO 03-22 10:55:20 [default_loader.py:384] Loading weights took 50.30 seconds",
    f"{P}INFO 03-22 10:55:21 [gpu_model_runner.py:4578] Model loading took 2.2 GiB memory and "
    "53.838931 seconds",
    f"{P}INFO 03-22 10:58:49 [kv_cache_utils.py:1100] GPU KV cache size: 111,616 tokens",
    "(APIServer pid=1) INFO 03-22 10:58:55 [api_server.py:1500] Starting vLLM API server 0 on "
    "http://0.0.0.0:8000",
    "(APIServer pid=1) INFO:     Application startup complete.",
]
FIRST_REQUEST_FAILS = [
    "(APIServer pid=1) INFO 03-22 11:02:10 [logger.py:43] Received request chatcmpl-1: "
    "prompt: 'hi', params: SamplingParams(n=1)",
    f"{P}ERROR 03-22 11:02:11 [core.py:900] EngineCore encountered a fatal error.",
    f"{P}ERROR 03-22 11:02:11 [core.py:900] Traceback (most recent call last):",
    f'{P}ERROR 03-22 11:02:11 [core.py:900]   File "/usr/local/lib/python3.12/dist-packages/'
    'vllm/v1/engine/core.py", line 891, in run_engine_core',
    f"{P}ERROR 03-22 11:02:11 [core.py:900]     engine_core.run_busy_loop()",
    f"{P}ERROR 03-22 11:02:11 [core.py:900] RuntimeError: CUDA error: an illegal memory access "
    "was encountered",
]


@cache
def model():  # the shipped text model (it reads the fallback line as a failure)
    return load_text_model(strict=True)


def report(lines: list[str], clf: Classifier | None = None) -> StreamReport:
    records = [LogRecord("s", t) for t in lines]
    return classify_records(records, clf or Classifier(RB))[0]


def rules_of(rep: StreamReport, key: str) -> list[str | None]:
    return [i["rule"] for i in rep[key]]  # type: ignore[literal-required]


# ---- offline: the whole log decides ----------------------------------------------------------
def test_nccl_ras_bind_warning_in_a_training_run_that_finished_never_pages() -> None:
    rep = report(NCCL_START + TRAINING)
    assert rep["incidents"] == []
    assert rules_of(rep, "warnings") == ["port-in-use"]
    assert "the run went on" in (rep["warnings"][0]["detail"] or "")


def test_the_same_warning_followed_by_a_death_pages_with_it() -> None:
    rep = report(NCCL_START + DEATH)
    (inc,) = rep["incidents"]
    lines = [inc["line"], *(r["line"] for r in inc["related"])]
    assert RAS_BIND in lines and DEATH[-1] in lines and rep["warnings"] == []


def test_an_nccl_probe_in_an_nccl_tests_run_that_passed_never_pages() -> None:
    rep = report(NCCL_TESTS)
    assert rep["incidents"] == [] and rules_of(rep, "warnings") == ["undefined-symbol"]


def test_an_erroring_fallback_in_a_server_that_got_up_is_a_warning() -> None:
    rep = report(VLLM_UP, Classifier(RB, text_model=model()))
    assert rep["status"] == "ready" and rep["incidents"] == []
    assert [w["line"] for w in rep["warnings"]] == [FA_FALLBACK]


def test_a_later_failure_is_the_root_cause_and_the_fallback_only_related() -> None:
    rep = report(VLLM_UP + FIRST_REQUEST_FAILS, Classifier(RB, text_model=model()))
    (inc,) = rep["incidents"]
    assert inc["line"] == FIRST_REQUEST_FAILS[-1] and inc["stage"] == "serving"
    assert FA_FALLBACK in [r["line"] for r in inc["related"]]
    assert rep["warnings"] == []


def test_a_fallback_is_the_cause_when_nothing_better_came() -> None:
    cascade = f"{P}ERROR 03-22 10:58:49 [core.py:1108] EngineCore failed to start."
    rep = report(VLLM_UP[:4] + [cascade], Classifier(RB, text_model=model()))
    (inc,) = rep["incidents"]
    assert inc["line"] == FA_FALLBACK
    assert cascade in [r["line"] for r in inc["related"]]


def test_a_fatal_finding_pages_on_its_own_line() -> None:
    clf = Classifier(RB)
    st = clf.state("s")
    for text in NCCL_START[:3]:
        assert clf.feed_text(st, text) == []
    changes = clf.feed_text(st, DEATH[0]) + clf.feed_text(st, DEATH[1])
    changes += clf.feed_text(st, DEATH[2])
    assert changes == []
    opened = clf.feed_text(st, DEATH[3])
    assert [(c.kind, c.incident.severity) for c in opened][:1] == [("opened", "critical")]


def test_a_signature_fatal_by_itself_pages_at_any_level() -> None:
    too_old = (
        "/usr/local/lib/python3.12/dist-packages/torch/cuda/__init__.py:174: UserWarning: CUDA "
        "initialization: The NVIDIA driver on your system is too old (found version 12080). "
        "Please update your GPU driver by downloading and installing a new version from the "
        "URL: http://www.nvidia.com/Download/index.aspx"
    )
    clf = Classifier(RB)
    changes = clf.feed_text(clf.state("s"), too_old)
    assert [(c.kind, c.incident.category) for c in changes] == [("opened", "driver_incompatible")]


def test_a_log_that_stops_mid_start_up_with_a_held_finding_pages_it() -> None:
    rep = report(VLLM_UP[:2] + [RAS_BIND])
    assert rules_of(rep, "incidents") == ["port-in-use"]


def test_a_log_that_just_stops_mid_start_up_is_never_healthy(tmp_path: Path) -> None:
    rep = report(VLLM_UP[:3])
    assert rep["incidents"] == [] and rep["stopped"] is not None
    assert rep["stopped"]["stage"] == "model_load"
    log = tmp_path / "oom-killed.log"
    log.write_text("\n".join(VLLM_UP[:3]) + "\n")
    got = predict(Case("oom-killed", log, "capacity", "host_memory", "model_load"), Classifier(RB))
    assert (got["tier"], got["category"], got["stage"]) == ("none", "stopped", "model_load")


# ---- the service: the timer decides ----------------------------------------------------------
def timed(clf: Classifier, st: StreamState, lines: list[str], start: float) -> list[Change]:
    changes: list[Change] = []
    for i, text in enumerate(lines):
        changes += clf.feed_text(st, text, start + i)
    return changes


def test_held_then_progress_is_a_warning_after_hold_s_and_never_pages() -> None:
    clf = Classifier(RB)
    hold = clf.judgements.get(outcome.KIND).hold_s
    st = clf.state("s")
    t0 = 1_000_000.0
    assert timed(clf, st, NCCL_START + TRAINING, t0) == []
    assert clf.tick(t0 + hold - 1) == []  # not yet: a failure may still come
    changes = clf.tick(t0 + hold + 10)
    assert [(c.kind, c.incident.severity, c.incident.primary.rule) for c in changes] == [
        ("opened", "warning", "port-in-use")
    ]
    assert clf.tick(t0 + 10 * hold) == [] and st.checks.held == []


def test_held_then_a_stall_pages_the_held_finding_as_root_cause() -> None:
    clf = Classifier(RB)
    hold = clf.judgements.get(outcome.KIND).hold_s
    st = clf.state("s")
    t0 = 1_000_000.0
    timed(clf, st, [*VLLM_UP[:2], RAS_BIND], t0)
    assert clf.tick(t0 + 2 * hold) == []  # the start-up has not moved: its stall decides
    deadline = clf.stall_deadlines["distributed_init"]
    changes = clf.tick(t0 + deadline + 10)
    inc = next(c.incident for c in changes if c.kind == "opened")
    assert (inc.severity, inc.primary.rule, inc.extra.get("stall")) == (
        "critical",
        "port-in-use",
        True,
    )


def test_a_held_finding_survives_a_snapshot() -> None:
    clf = Classifier(RB)
    st = clf.state("s")
    timed(clf, st, NCCL_START, 1_000_000.0)
    back = StreamState.from_dict(st.to_dict())
    assert [h.finding.line for h in back.checks.held] == [RAS_BIND]
    assert back.to_dict() == st.to_dict()


def test_a_new_run_after_a_start_up_that_died_pages_its_held_finding() -> None:
    clf = Classifier(RB)
    st = clf.state("s")
    banner = (
        "(APIServer pid=1) INFO 03-22 10:53:51 [api_server.py:1400] vLLM API server version 0.18.1"
    )
    changes = timed(clf, st, [banner, *VLLM_UP[1:2], RAS_BIND], 1_000_000.0)
    changes += timed(clf, st, [banner], 1_000_100.0)
    assert [(c.kind, c.incident.primary.rule, c.incident.run) for c in changes] == [
        ("opened", "port-in-use", 0)
    ]


def test_without_the_outcome_judgement_every_finding_pages_at_once(tmp_path: Path) -> None:
    (tmp_path / "judgements.yaml").write_text("outcome: {enabled: false}\n")
    clf = Classifier(load_rule_set([tmp_path]).rulebook())
    changes = timed(clf, clf.state("s"), NCCL_START, 1_000_000.0)
    assert [(c.kind, c.incident.severity) for c in changes] == [("opened", "critical")]


def test_a_held_failure_of_a_program_without_start_up_stages_pages_at_its_stall() -> None:
    """DeepEP's NCCL set-up failing (deepseek-ai/DeepEP#143), then silence: no stage the
    stall judgement watches, so the held finding's own stage gives the deadline."""
    cq = (
        "msm-h200-2:4016:4653 [7] misc/ibvwrap.cc:190 NCCL WARN Call to ibv_create_cq failed "
        "with error Cannot allocate memory"
    )
    clf = Classifier(RB)
    st = clf.state("s")
    t0 = 1_000_000.0
    assert clf.feed_text(st, cq, t0) == [] and st.stage is None
    hold = clf.judgements.get(outcome.KIND).hold_s
    assert clf.tick(t0 + hold + 1) == []  # it did not go on: kept
    (h,) = st.checks.held
    deadline = clf.stall_deadlines[h.finding.stage]
    assert clf.tick(t0 + deadline - 1) == []
    changes = clf.tick(t0 + deadline + 1)
    assert [(c.kind, c.incident.severity, c.incident.primary.line) for c in changes][:1] == [
        ("opened", "critical", cq)
    ]


def test_a_start_up_stopped_while_stuck_pages_its_held_finding() -> None:
    """Ray never places the engine's GPUs (gpustack/gpustack#5509's wording), then the
    orchestrator's SIGTERM: the start-up never got up, which is a failure outcome."""
    waiting = (
        "(EngineCore pid=84) INFO 06-07 18:13:55 [ray_utils.py:464] Waiting for creating a "
        "placement group of specs for 150 seconds. specs=[{'GPU': 1.0}, {'GPU': 1.0}]. Check "
        "`ray status` and `ray list nodes` to see if you have enough resources, and make sure "
        "the IP addresses used by ray cluster are the same as VLLM_HOST_IP environment variable "
        "specified in each node if you are running on a multi-node."
    )
    sigterm = (
        "(APIServer pid=1) INFO 06-07 18:16:20 [launcher.py:80] Received SIGTERM, shutting down."
    )
    rep = report([VLLM_UP[0], VLLM_UP[1], waiting, sigterm])
    assert rules_of(rep, "incidents") == ["ray-placement-group-stuck"] and rep["warnings"] == []
