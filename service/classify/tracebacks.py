"""What each process of a stream is in the middle of, keyed by (stream, process): a
traceback not ended by its exception line yet (its frame and code lines, for a log that ends
inside it), what its frames hint (:class:`~.frames.Block`), whether its next traceback is
chained to the last one (the block that raised first decides when it hinted a stage), and
the finding whose stage later frames of the same process may still refine.

The library and function of the innermost frame a traceback reached are kept for the one
line that ends it (its exception line, usually): the text model reads them as context
(:mod:`service.classify.model_context`).

Memory only: a traceback is a few lines of one process; a stream forgotten (evicted, its
partition revoked) forgets them too.
"""

from __future__ import annotations

from collections.abc import Iterable

from service.classify.frames import Block, FrameStage
from service.classify.model_context import frame_of
from service.incidents.finding import Finding
from service.incidents.incident import Incident

Where = tuple[str, str]  # (stream key, process key)
MAX_TRACEBACK_LINES = 80  # frame/source lines kept of one open traceback


class ProcessTracks:
    """Open tracebacks, chained ones, and findings still open to refinement, per process."""

    def __init__(self) -> None:
        self.open: dict[Where, list[str]] = {}
        self.chained: set[Where] = set()
        self.refining: dict[Where, tuple[Finding, Incident | None]] = {}
        self.deepest: dict[Where, tuple[str, str]] = {}  # innermost frame of the open traceback
        self.ended: dict[Where, tuple[str, str]] = {}  # ... of the one the current line ends
        self.blocks: dict[Where, Block] = {}  # what the process's traceback frames hint
        self.decided: set[Where] = set()  # a chain whose first block hinted: it decides

    def start(self, where: Where) -> bool:
        """A traceback starts; whether it is chained to the process's previous one (then
        the block that raised first keeps deciding, when it hinted a stage)."""
        chained = where in self.chained
        self.chained.discard(where)
        self.open[where] = []
        block = self.blocks.get(where)
        if chained and block is not None and block.hint is not None:
            self.decided.add(where)
        else:
            self.decided.discard(where)
            self.blocks[where] = Block()
        return chained

    def frame(self, where: Where, hint: FrameStage) -> str | None:
        """A frame of the process's traceback hints ``hint``: the stage its frames decide
        now, or None when an earlier block of the chain decides."""
        if where in self.decided:
            return None
        block = self.blocks.setdefault(where, Block())
        block.add(hint)
        return block.hint

    def chain(self, where: Where) -> None:
        """ "The above exception was the direct cause of ...": the next block continues."""
        self.refining.pop(where, None)
        self.chained.add(where)

    def line(self, where: Where, text: str) -> None:
        tb = self.open.get(where)
        if tb is not None and len(tb) < MAX_TRACEBACK_LINES:
            tb.append(text)
        frame = frame_of(text)
        if frame is not None:
            self.deepest[where] = frame

    def close(self, where: Where) -> None:
        """A line of the process that is no traceback line: its traceback (if any) ends."""
        self.open.pop(where, None)
        frame = self.deepest.pop(where, None)
        if frame is not None:
            self.ended[where] = frame
        else:
            self.ended.pop(where, None)

    def innermost(self, where: Where) -> tuple[str, str] | None:
        """(library, function) of the innermost frame of the traceback the process's
        current line ended, if it ended one."""
        return self.ended.get(where)

    def has_open(self, stream: str) -> bool:
        return any(k[0] == stream for k in self.open)

    def take_open(self, stream: str) -> list[tuple[str, list[str]]]:
        """The stream's open tracebacks that hold lines, (process, lines), removed."""
        out = []
        for where, tb in list(self.open.items()):
            if where[0] == stream and tb:
                del self.open[where]
                out.append((where[1], tb))
        return out

    def watch(self, where: Where, f: Finding, inc: Incident | None) -> None:
        """``f`` (of ``inc``) is the finding later frames of the process may refine."""
        self.refining[where] = (f, inc)

    def repoint(self, old: Incident, new: Incident) -> None:
        """``old`` was folded into ``new``: findings refined later update ``new``."""
        for key, (f, owner) in list(self.refining.items()):
            if owner is old:
                self.refining[key] = (f, new)

    def forget(self, streams: Iterable[str]) -> None:
        gone = set(streams)
        for key in [k for k in self.refining if k[0] in gone]:
            del self.refining[key]
        for key in [k for k in self.open if k[0] in gone]:
            del self.open[key]
        for held in (self.deepest, self.ended):
            for key in [k for k in held if k[0] in gone]:
                del held[key]
        for key in [k for k in self.blocks if k[0] in gone]:
            del self.blocks[key]
        self.chained = {k for k in self.chained if k[0] not in gone}
        self.decided = {k for k in self.decided if k[0] not in gone}
