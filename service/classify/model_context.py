"""What the stream knows about a line, for the text model: its :class:`ModelContext`.

The words of one line rarely say everything: ``TypeError: unsupported operand type(s)``
is a library that does not fit the Python version when its innermost frame is
``flash_attn/...`` in ``<module>``; ``out of memory`` is the KV cache when the stream is
profiling and a request when it is serving; an ERROR line of another program's logger is
rarely benign. The context carries those facts next to the text: the program whose log it
is (the stream's ``program`` fact, ``rules/facts.yaml``), the start-up stage the stream
reached, the line's level, kind and exception type (:mod:`service.parse.line`), and the
library of the innermost traceback frame of the line's process (and whether that frame is
a module body, i.e. an import). The same function builds it at run time
(:mod:`service.classify.findings`) and in training (``service.training.context``), from
the same parse and the same stream state, so the model reads both the same way.

:meth:`ModelContext.tokens` is what the model reads: one word per known fact
(``stage_kv_cache_init level_error lib_flash_attn in_module``); an unknown fact has no word.
The line's kind is kept on the record but not a word: the key line's own text shows it.
Pure functions of their arguments.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from service.parse import line as L

__all__ = ["ModelContext", "context_of", "frame_library", "frame_of", "program_name"]

_FRAME = re.compile(
    r'\s*(?:\[rank\d+\]:\s*)?File "(?P<path>[^"]+)", line \d+, in (?P<func>[\w<>.]+)'
)
# the package directory of a Python file: site-/dist-packages, a source checkout's top package
_PACKAGE = re.compile(r"(?:site|dist)-packages/(?P<pkg>[A-Za-z_][\w.]*?)(?:-[\d.]+[^/]*)?/")
_TOKEN = re.compile(r"[^a-z0-9_.]+")
# source checkouts of the programs whose logs we read: ".../vllm/vllm/worker/x.py"
_CHECKOUT = re.compile(
    r"/(?P<pkg>vllm|sglang|torch|triton|flashinfer|flash_attn|xformers|"
    r"deep_gemm|deep_ep|tensorrt_llm|text_generation_server|lmdeploy|"
    r"transformers|ray|nixl|lmcache|mooncake)/[\w/]+\.py$"
)


# the ``program`` fact's wordings (rules/facts.yaml) → one name per program
_PROGRAMS = {
    "vllm": "vllm",
    "llm engine": "vllm",
    "automatically detected platform": "vllm",
    "sglang": "sglang",
    "serverargs": "sglang",
    "text_generation_launcher": "tgi",
    "text_generation_router": "tgi",
    "text_generation_server": "tgi",
    "ollama": "ollama",
    "tensorrt-llm": "tensorrt_llm",
    "trt-llm": "tensorrt_llm",
    "tritonserver": "triton",
    "triton inference server": "triton",
    "lmdeploy": "lmdeploy",
    "turbomind": "lmdeploy",
    "nthread": "nccl_tests",
}
_LLAMA_CPP = ("llama_", "ggml_", "load_tensors")


def program_name(fact: str | None) -> str | None:
    """The program a ``program`` fact's wording names (``None``: no fact)."""
    if not fact:
        return None
    low = fact.lower()
    if low.startswith(_LLAMA_CPP):
        return "llama_cpp"
    return _PROGRAMS.get(low, low)


@dataclass(frozen=True, slots=True)
class ModelContext:
    """The facts around one line (``None``: not known)."""

    program: str | None = None
    stage: str | None = None
    level: str | None = None
    kind: str | None = None
    exc: str | None = None
    library: str | None = None
    in_module: bool = False

    def tokens(self) -> str:
        """The context as the model reads it: ``name_value`` words, known facts only."""
        words = []
        for name, value in (
            ("prog", self.program),
            ("stage", self.stage),
            ("level", self.level),
            ("exc", self.exc.rsplit(".", 1)[-1] if self.exc else None),
            ("lib", self.library),
        ):
            if value:
                words.append(f"{name}_{_TOKEN.sub('_', value.lower()).strip('_')}")
        if self.in_module:
            words.append("in_module")
        return " ".join(words)


def frame_of(message: str) -> tuple[str, str] | None:
    """(library, function) of a traceback frame line, else None; the library is the
    package directory the file lives in (``flash_attn``, ``vllm``, ``triton`` ...), or
    ``""`` when the path names none."""
    m = _FRAME.match(message)
    if m is None:
        return None
    return frame_library(m.group("path")), m.group("func")


def frame_library(path: str) -> str:
    """The top-level package of a Python source path, ``""`` when it names none."""
    path = path.replace("\\", "/")
    m = _PACKAGE.search(path)
    if m:
        return m.group("pkg").split(".", 1)[0].lower()
    c = _CHECKOUT.search(path)
    return c.group("pkg") if c else ""


def context_of(
    line: L.Line,
    *,
    stage: str | None = None,
    program: str | None = None,
    frame: tuple[str, str] | None = None,
) -> ModelContext:
    """The context of ``line``: what it shows itself (level, kind, exception type) and what
    its stream knows (``stage`` reached, ``program`` fact, ``frame``: the (library,
    function) of the innermost traceback frame its process printed before it)."""
    lib, func = frame if frame else ("", "")
    return ModelContext(
        program=program_name(program),
        stage=stage,
        level=line.level,
        kind=line.kind,
        exc=line.exc,
        library=lib or None,
        in_module=func == "<module>",
    )
