"""The record every check over a stream returns: a :class:`Judgement` is a finding no single
line carries (a stall, a wait repeated, numbers across stats lines, a start-up setting), and
the engine attaches it to the stream's incidents as it attaches a line's finding."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Judgement:
    """``rule`` names it (``stall-<stage>``, ``kv-cache-saturated`` ...); ``detail`` says
    what triggered it, with the numbers; ``line`` is the log line it was judged on.

    ``role``: ``warning`` never pages; ``symptom`` (a stall) pages and gives way to a root
    cause found later. ``stage``: where it happened (None: the stage the stream is at).
    ``stall``: the incident it lands on is marked ``extra.stall``."""

    rule: str
    category: str
    detail: str
    line: str = ""
    role: str = "warning"
    stage: str | None = None
    stall: bool = False
