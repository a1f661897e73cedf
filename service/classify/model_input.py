"""What the text model reads of an event: its key line and the whole event, both masked,
and what the stream knows around it.

An event is one error-looking log message, optionally with a few context lines (a
traceback, NCCL's ``Last error:`` block, torch's CUDA footer). :func:`key_index` picks the
line that carries its meaning; :func:`event_fields` masks it and the whole event
(:mod:`service.parse.masking`) and adds the stream's context
(:class:`service.classify.model_context.ModelContext`: program, stage reached, level,
exception type, innermost frame's library) into the three fields every feature of the
model is computed from - at training time and at run time alike, so both read an event
the same way. Pure functions of the text and the context.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from service.classify.model_context import ModelContext
from service.parse.masking import mask, mask_lines

__all__ = ["Fields", "event_fields", "key_index", "key_line"]

# (masked key line, masked whole event, context words)
Fields = tuple[str, str, str]

_RANK = r"(?:\[rank\d+\]:\s*)?"
_FRAME_LINE = re.compile(r"^\s*" + _RANK + r'File "')
_SKIP_LINE = re.compile(
    r"^\s*" + _RANK + r"(?:Traceback \(most recent call last\):|The above exception was"
    r"|During handling of the above exception|CUDA kernel errors might be asynchronously"
    r"|For debugging consider passing CUDA_LAUNCH_BLOCKING|Compile with `TORCH_USE_CUDA_DSA`"
    r"|[\^~ ]+$|\.\.\.<\d+ lines>\.\.\.$)"
)
_LAST_ERROR = re.compile(r"^\s*" + _RANK + r"Last error:\s*$")
_EXC_LINE = re.compile(r"^\s*" + _RANK + r"[\w.]*(?:Error|Exception|Exit|Interrupt)\b[\w.]*:")
_ERRORISH = re.compile(
    r"error|fail|fatal|killed|warn|exception|timeout|timed out|cannot|unable|not found|"
    r"too old|insufficient|mismatch|not supported|no such|unsupported|invalid|refused",
    re.IGNORECASE,
)


def key_index(lines: Sequence[str]) -> int:
    """Index of the line of an event that carries its meaning.

    Traceback frames, the source lines under them, caret markers, cascade headers and
    torch's fixed CUDA-error footer are skipped. Preference: the line after ``Last error:``
    (NCCL), then the last exception line (``XxxError: ...``), then the last error-ish
    line, then the last remaining line.
    """
    n = len(lines)
    if n <= 1:
        return 0
    kept: list[int] = []
    after_frame = False
    last_error_next = False
    picked: int | None = None
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        if _FRAME_LINE.match(line):
            after_frame = True
            continue
        if after_frame and line.startswith((" ", "\t", "[rank")) and not _EXC_LINE.match(line):
            after_frame = False
            continue
        after_frame = False
        if _SKIP_LINE.match(line):
            continue
        if last_error_next:
            picked = i
            last_error_next = False
        if _LAST_ERROR.match(line):
            last_error_next = True
            continue
        kept.append(i)
    if picked is not None:
        return picked
    if not kept:
        return n - 1
    for pattern in (_EXC_LINE, _ERRORISH):
        for i in reversed(kept):
            if pattern.search(lines[i]):
                return i
    return kept[-1]


def key_line(text: str) -> str:
    """The raw line of ``text`` that :func:`key_index` picks."""
    lines = text.replace("\r", "").split("\n")
    return lines[key_index(lines)]


def event_fields(text: str, context: ModelContext | None = None) -> Fields:
    """(masked key line, masked whole event, context words): the inputs of the feature
    pipeline."""
    raw = text.replace("\r", "")
    lines = raw.split("\n")
    masked = mask_lines(raw)
    words = context.tokens() if context is not None else ""
    if len(masked) != len(lines):  # masking never joins lines; be safe anyway
        return mask(key_line(raw)), mask(raw), words
    key = masked[key_index(lines)]
    return key, "\n".join(masked).strip(), words
