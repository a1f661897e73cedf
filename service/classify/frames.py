"""The frame map (``rules/frames.yaml``) applied to tracebacks: the rung a frame hints, and
what the frames of one traceback (a chain of blocks) say together.

* The innermost mapped frame of the engine's own code decides (a traceback lists the
  outermost call first); a library's frame (torch) only when no engine frame is mapped.
* A ``serving`` frame only when no start-up frame is in the block: V0's ``profile_run``
  runs ``execute_model``, V1's data-parallel ranks run ``_dummy_run`` while serving.
* Wrappers (executors, RPC, decorators, entry points) are not in the map: they never hint.
* A message only mapped functions raise (``raised:``) places its line like their frames
  would, when the log has no traceback.
* In a chain ("The above exception was the direct cause ...", "During handling ..."), the
  block that raised first decides when it hinted anything; the later blocks only when not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from service.classify.rules import FrameEntry, FrameRules

SERVING = "serving"


@dataclass(frozen=True, slots=True)
class FrameStage:
    """What one frame hints: a stage, and whether the frame is the engine's own code."""

    stage: str
    engine: bool


class FrameMap:
    """Function name (and path) of a frame → the rung it hints."""

    def __init__(self, rules: FrameRules) -> None:
        self.engine_paths = re.compile(rules.engine_paths)
        self.by_func: dict[str, list[FrameEntry]] = {}
        for entry in rules.frames:
            self.by_func.setdefault(entry.func, []).append(entry)
        self.wrappers = frozenset(w.func for w in rules.wrappers)
        self.raised = [(re.compile(r.pattern), r.stage) for r in rules.raised]

    def stage_of(self, func: str | None, path: str | None) -> FrameStage | None:
        """The rung a frame of ``func`` in file ``path`` hints, or None."""
        for entry in self.by_func.get(func or "", ()):
            if entry.within and not (path and any(w in path for w in entry.within)):
                continue
            return FrameStage(entry.stage, bool(path and self.engine_paths.search(path)))
        return None

    def raised_stage(self, message: str) -> str | None:
        """The rung of a message only mapped functions raise (``raised:``), or None."""
        head = message[:2000]
        return next((stage for pattern, stage in self.raised if pattern.search(head)), None)


@dataclass(slots=True)
class Block:
    """The hints of one traceback's frames so far (the innermost of each kind)."""

    engine: str | None = None  # start-up rung of the engine's own code
    engine_serving: bool = False
    library: str | None = None  # start-up rung of a library (torch)
    library_serving: bool = False

    def add(self, hint: FrameStage) -> None:
        if hint.stage == SERVING:
            if hint.engine:
                self.engine_serving = True
            else:
                self.library_serving = True
        elif hint.engine:
            self.engine = hint.stage
        else:
            self.library = hint.stage

    @property
    def hint(self) -> str | None:
        """The stage the block's frames decide, or None."""
        if self.engine:
            return self.engine
        if self.engine_serving:
            return SERVING
        if self.library:
            return self.library
        return SERVING if self.library_serving else None
