"""The context of each training line, built the way the classifier builds it at run time.

Real lines come with their stream: the lines of one public thread (``real_threads/``) or
one whole log (``real_logs/``) are replayed, in order, through a signatures-only
:class:`~service.classify.engine.Classifier`; after each line the stream's stage, its
``program`` fact and the innermost traceback frame the line ended are read, exactly what
:meth:`service.classify.findings.Findings.context` hands the model for that line. A lone
text (seed wordings, generated variations, vLLM's log strings) has no stream: its context
is what the text shows itself (level, kind, exception type of its key line, the innermost
frame written above it), plus the logger level its source names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import replace

from service.classify.engine import Classifier
from service.classify.model_context import ModelContext, context_of, frame_of
from service.classify.model_input import key_index
from service.classify.rulebook import RuleBook
from service.parse.line import parse_line
from service.records import LogRecord

__all__ = ["replay", "text_context"]

_LOGGER_LEVEL = re.compile(r"\blogger\.(debug|info|warning|error|exception|critical)")
_LEVELS = {"exception": "ERROR"}


def replay(streams: Iterable[tuple[str, Sequence[str]]], rules: RuleBook) -> list[ModelContext]:
    """The context of every line of every ``(stream id, lines)``, in input order."""
    clf = Classifier(rules)
    out: list[ModelContext] = []
    for key, lines in streams:
        for text in lines:
            clf.feed(LogRecord(stream=key, text=text))
            st = clf.state(key)
            line = parse_line(text)
            frame = clf.tracker.tracks.innermost((key, line.proc_key))
            out.append(
                context_of(line, stage=st.stage, program=st.facts.get("program"), frame=frame)
            )
        clf.forget([key])
    return out


def text_context(text: str, source: str = "") -> ModelContext:
    """The context a lone text shows itself: its key line's level, kind and exception type,
    the innermost frame above that line, the logger level ``source`` names."""
    lines = text.replace("\r", "").split("\n")
    k = key_index(lines)
    line = parse_line(lines[k])
    frame = None
    for raw in lines[:k]:
        frame = frame_of(raw) or frame
    ctx = context_of(line, frame=frame)
    m = _LOGGER_LEVEL.search(source) if ctx.level is None else None
    if m:
        return replace(ctx, level=_LEVELS.get(m.group(1), m.group(1).upper()))
    return ctx
