"""What the text model is told about a line besides its words (service/classify/
model_context.py): the stream's program, stage reached, the line's level / kind / exception
type and the innermost traceback frame its process printed before it - built the same way
when the classifier asks the model and when training replays a thread."""

from __future__ import annotations

from service.classify.engine import Classifier
from service.classify.model_context import ModelContext, context_of, frame_library, frame_of
from service.classify.text_model import Prediction
from service.parse.line import parse_line
from service.records import LogRecord
from service.training.context import replay, text_context

LOG = [
    "INFO 03-02 10:00:00 [__init__.py:1] Automatically detected platform cuda.",
    "INFO 03-02 10:00:05 [gpu_model_runner.py:1] Starting to load model Qwen/Qwen3-8B...",
    "INFO 03-02 10:00:30 [gpu_worker.py:1] Memory profiling takes 3.1 seconds",
    "(EngineCore_DP0 pid=7) ERROR 03-02 10:00:31 [core.py:708] Traceback (most recent call last):",
    '(EngineCore_DP0 pid=7) ERROR 03-02 10:00:31 [core.py:708]   File "/usr/local/lib/python3.9/'
    'site-packages/vllm/attention/backends/flash_attn.py", line 20, in <module>',
    "(EngineCore_DP0 pid=7) ERROR 03-02 10:00:31 [core.py:708]     from flash_attn import x",
    '(EngineCore_DP0 pid=7) ERROR 03-02 10:00:31 [core.py:708]   File "/usr/local/lib/python3.9/'
    'site-packages/flash_attn/flash_attn_interface.py", line 15, in <module>',
    "(EngineCore_DP0 pid=7) ERROR 03-02 10:00:31 [core.py:708]     def f(x: int | None): ...",
    "(EngineCore_DP0 pid=7) ERROR 03-02 10:00:31 [core.py:708] TypeError: unsupported operand "
    "type(s) for |: 'type' and 'NoneType'",
]


class Recorder:
    """A model that records what it was asked and abstains."""

    threshold = 0.5

    def __init__(self) -> None:
        self.asked: list[tuple[str, ModelContext | None]] = []

    def predict(self, text: str, context: ModelContext | None = None) -> Prediction:
        self.asked.append((text, context))
        return Prediction("unknown", "other", 0.1, text, "healthy")


def test_the_model_is_told_the_stage_program_level_and_innermost_library() -> None:
    model = Recorder()
    clf = Classifier(text_model=model)
    lines = LOG[:-1] + [
        "(EngineCore_DP0 pid=7) ERROR 03-02 10:00:31 [core.py:708] "
        "TypeError: this wording matches no signature at all"
    ]
    for text in lines:
        clf.feed(LogRecord(stream="s", text=text))
    text, ctx = model.asked[-1]
    assert text.startswith("TypeError: this wording")
    assert ctx is not None
    assert ctx.tokens() == (
        "prog_vllm stage_kv_cache_init level_error exc_typeerror lib_flash_attn in_module"
    )


def test_training_replays_a_stream_to_the_same_context() -> None:
    contexts = replay([("t", LOG)], Classifier().rules)
    last = contexts[-1]
    assert (last.program, last.stage, last.library, last.in_module) == (
        "vllm",
        "kv_cache_init",
        "flash_attn",
        True,
    )
    assert contexts[0].library is None  # no traceback yet


def test_an_innermost_frame_counts_for_the_line_that_ends_its_traceback_only() -> None:
    clf = Classifier()
    for text in [*LOG, "(EngineCore_DP0 pid=7) ERROR 03-02 10:00:32 [core.py:710] next line"]:
        clf.feed(LogRecord(stream="s", text=text))
    assert clf.tracker.tracks.innermost(("s", "EngineCore_DP0:7")) is None


def test_a_lone_text_shows_its_own_level_exception_and_frame() -> None:
    text = (
        'File "/opt/conda/lib/python3.8/site-packages/flashinfer/cascade.py", line 276, in W\n'
        "TypeError: 'type' object is not subscriptable"
    )
    assert text_context(text).tokens() == "level_error exc_typeerror lib_flashinfer"
    src = "vllm-project/vllm:vllm/config.py:10 (vllm 0.32.0, logger.warning_once)"
    assert text_context("Casting torch.bfloat16 to torch.float16.", src).level == "WARNING"


def test_frame_libraries_of_installed_and_checked_out_packages() -> None:
    assert frame_library("/usr/lib/python3/dist-packages/xformers/ops/fmha.py") == "xformers"
    assert frame_library("C:\\py\\Lib\\site-packages\\deep_gemm\\jit\\x.py") == "deep_gemm"
    assert frame_library("/root/vllm/vllm/worker/worker.py") == "vllm"
    assert frame_library("/app/server.py") == ""
    assert frame_of('  File "/x/site-packages/triton/compiler.py", line 3, in <module>') == (
        "triton",
        "<module>",
    )
    assert frame_of("TypeError: x") is None


def test_unknown_facts_have_no_word() -> None:
    ctx = context_of(parse_line("some plain line"))
    assert ctx.tokens() == ""


def test_a_bare_error_word_is_never_classified_whatever_its_context() -> None:
    from service.classify.text_model import _says_something

    assert not _says_something("Error:")
    assert not _says_something("**ERROR** <NUM>")
    assert _says_something("Memory region not registered by any active device(s): <HEX>")
