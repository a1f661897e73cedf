"""A page needs an outcome (block ``outcome``): a finding that is not fatal by itself waits,
held, for what the stream does next (docs/taxonomy.md "Which findings page at once").

* **Fatal at once** (:func:`needs_outcome` is False): an exception line (a traceback reached
  its top, or a bare ``XError: ...``), a signature's line at ``ERROR`` / ``CRITICAL`` level or
  with no level (a program's own failure message, the kernel, the container runtime), a
  signature that says ``fatal: true`` whatever the level (the driver too old, an engine that
  died), a judgement (a stall is the start-up's outcome), Kubernetes' evidence (the container
  exited or was killed), a log that ends inside a traceback.
* **Needs an outcome**: a signature's line at ``INFO`` / ``WARNING`` / ``DEBUG`` level (a
  library's notice: NCCL ``WARN`` / ``INFO``, a Python warning, a probe) or a signature that
  says ``fatal: false`` (a known fallback or probe at any level), and the text model's or the
  heuristic's guess on a line that is not an exception (an ``ERROR``-level fallback, an NCCL
  ``WARN`` line, another program's unlevelled line); an exception line inside a record
  logged at a notice level (a traceback the program caught and logged as a warning: an
  optional import probe); a line whose own words say the program recovers (block
  ``recovers``: it retries, falls back, or a library's allocator hands the failure to its
  caller), at any level; a server's bind failure naming its port (block ``binds``) at any
  level, that is recovered only when a server of the run then binds that port (``bound``:
  an app restarted beside the engine retries until the old one let go) and pages otherwise;
  a notice printed from a subsystem whose notices are probes (block ``notices_from``: NCCL's
  RAS thread), which like a ``fatal: false`` signature never takes a later failure's root cause.

A held finding pages only when the run then shows a failure outcome (a fatal finding, a
stall, the container's death, a run that ends mid-start-up); when the run goes on (a later
start-up stage, ready, serving lines, training steps, benchmark rows) it is a warning after
``hold_s``; a start-up that does not go on pages it at the stall deadline of its stage. Held ``ERROR``-level fallbacks and model guesses (:func:`yields`) are never the
root cause when a later failure exists: they join its incident as related findings.

Configuration and pure decisions: the chain's ``Find`` stage holds (:mod:`..chain`), the
incident book releases or settles (:mod:`..incident_book`), the classifier's timer and the
end of an offline log ask for the decision (:mod:`..engine`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from pydantic import Field

from service.classify.judgements.judge import Config, Kind
from service.classify.rules import Signature
from service.classify.run_state import Held
from service.classify.stream_state import READY, SERVING, STARTING, STOPPED, StreamState
from service.incidents.finding import Finding
from service.parse import line as L
from service.taxonomy import STAGE_INDEX, later_stage

NOTICE_LEVELS = frozenset({"INFO", "WARNING", "DEBUG", "TRACE"})  # a notice, not a failure
UP = (READY, SERVING, STOPPED)  # the server got up (or stopped in order)


class OutcomeRules(Config):
    hold_s: float = Field(gt=0)  # seconds a held finding waits before the run's going on counts
    # wordings (regular expressions) of a line whose program recovers: it retries, falls back,
    # or a library's allocator returns the failure to its caller, which decides
    recovers: tuple[str, ...] = ()
    # a server's bind failure naming its port (group ``port``), and its bound / listening line
    # (group ``port``): a failure followed in the run by a bind of the same port recovered
    binds: tuple[str, ...] = ()
    bound: tuple[str, ...] = ()
    # source files (the line's ``file:line``, regular expressions) of a subsystem whose notice
    # lines (INFO / WARN) are its own probes: held, and never the root cause of a later failure
    notices_from: tuple[str, ...] = ()
    # wordings of an exception that says a process died (killed by a signal, exited): an
    # outcome itself, never held as a caught exception whose run may go on
    deaths: tuple[str, ...] = ()
    # the engine's own process names (a line's process prefix): a failure there is the
    # engine's, never held as a worker's caught application error
    engine_processes: str = ""

    def dying(self) -> re.Pattern[str] | None:
        """The ``deaths`` wordings as one expression (None: none configured)."""
        return re.compile("|".join(f"(?:{w})" for w in self.deaths)) if self.deaths else None

    def notice_files(self) -> re.Pattern[str] | None:
        """The ``notices_from`` files as one expression (None: none configured)."""
        return (
            re.compile("|".join(f"(?:{w})" for w in self.notices_from))
            if self.notices_from
            else None
        )

    def recovering(self) -> re.Pattern[str] | None:
        """The ``recovers`` wordings as one expression (None: none configured)."""
        return re.compile("|".join(f"(?:{w})" for w in self.recovers)) if self.recovers else None

    def ports(self) -> Ports:
        """The ``binds`` / ``bound`` wordings, compiled."""
        return Ports(tuple(map(re.compile, self.binds)), tuple(map(re.compile, self.bound)))


class Ports:
    """The port a line failed to bind (:meth:`failed`) or bound (:meth:`bound`), or None."""

    def __init__(self, fails: tuple[re.Pattern[str], ...], binds: tuple[re.Pattern[str], ...]):
        self.fails = fails
        self.binds = binds

    @staticmethod
    def _port(patterns: tuple[re.Pattern[str], ...], message: str) -> int | None:
        for p in patterns:
            m = p.search(message)
            if m is not None:
                return int(m.group("port"))
        return None

    def failed(self, line: L.Line) -> int | None:
        """The port ``line`` says a server could not bind; a raised exception (the process
        died with it) is no retry: None."""
        return None if line.kind == L.EXCEPTION else self._port(self.fails, line.message)

    def bound(self, message: str) -> int | None:
        return self._port(self.binds, message)


def needs_outcome(
    f: Finding, line: L.Line, sig: Signature | None, recovering: bool = False
) -> bool:
    """Whether ``f`` (the finding of ``line``; ``sig``: the signature that made it;
    ``recovering``: the line says its program recovers) pages only once the stream shows a
    failure outcome (see the module's docstring)."""
    if f.role == "warning" or (sig is not None and sig.fatal):
        return False
    if line.kind == L.EXCEPTION:  # raised, unless a notice-level record logged it (caught)
        return line.level in NOTICE_LEVELS
    if recovering or sig is None:  # a retry / fallback; a guess on a non-exception line
        return True
    if sig.fatal is not None:
        return not sig.fatal
    return line.level in NOTICE_LEVELS


def yields(f: Finding, line: L.Line, sig: Signature | None, recovering: bool = False) -> bool:
    """Whether held ``f`` gives the root cause to a later failure of its run: an ``ERROR``-level
    fallback (a line that is not an exception and no signature calls fatal) or a guess of the
    model; a library's WARN / INFO that a signature knows competes as before (an NCCL WARN
    naming the transport that failed explains the generic "NCCL error" raised after it), and
    so does a known failure its program tried to recover from (the allocation that failed
    explains the failure its caller then reports); a signature that says ``fatal: false`` (a
    known fallback or probe) always yields."""
    if sig is not None and sig.fatal is False:  # a known fallback or probe
        return True
    if sig is not None and recovering:
        return False
    return sig is None or line.level not in NOTICE_LEVELS


def subsystem_notice(line: L.Line, files: re.Pattern[str] | None) -> bool:
    """Whether ``line`` is a notice (INFO / WARN) printed from a file of a subsystem whose
    notices are its own probes (block ``notices_from``: NCCL's RAS thread)."""
    return (
        files is not None
        and line.level in NOTICE_LEVELS
        and line.fileinfo is not None
        and files.search(line.fileinfo) is not None
    )


def rebind_failed(h: Held) -> bool:
    """Held ``h`` is a bind failure whose port no server of the run bound since: the conflict
    is real whatever else the run did (a failure outcome once it is due)."""
    return h.port is not None and not h.rebound


def caught(line: L.Line, deaths: re.Pattern[str] | None, engines: str, working: bool) -> bool:
    """An exception line at ``ERROR`` of a worker process beside the engine (a Ray actor's
    prefix that is not one of the engine's ``engine_processes``), while the run is doing its
    work (``working``: serving, training steps), that does not say a process died (block
    ``deaths``): whether the run survived it, only the work that follows says (a roll-out
    worker's application error while training steps go on)."""
    return (
        working
        and line.kind == L.EXCEPTION
        and line.level == "ERROR"
        and line.process is not None
        and not (engines and re.fullmatch(engines, line.process))
        and (deaths is None or deaths.search(line.message) is None)
    )


def unrecovered(h: Held) -> bool:
    """Held ``h`` waits for a proof of recovery that has not come: its port bound again, or
    (a caught exception) the run's work advancing since; without it, it pages once due."""
    return (h.port is not None or h.work) and not h.rebound


def went_on(st: StreamState, h: Held) -> bool:
    """Whether the run went on after ``h`` was held: it got up since (ready, or serving: requests,
    stats, and for other programs their work - training steps, benchmark rows, ``stages.yaml``
    ``serving:``), or got past the start-up stage it was in and the stage of the finding."""
    if st.status in UP and h.status not in UP:
        return True
    since = later_stage(h.stage, h.finding.stage) or h.finding.stage  # where the run was
    return st.stage is not None and STAGE_INDEX[st.stage] > STAGE_INDEX.get(since, -1)


def overdue(h: Held, now: float | None, deadlines: Mapping[str, float]) -> bool:
    """Whether ``h``'s start-up has not gone on for the stall deadline of the stage it was held
    at (block ``stalls``): the stall outcome, also for a program whose stages the stall
    judgement never saw (its finding's stage is the one it stalled in)."""
    stage = later_stage(h.stage, h.finding.stage) or h.finding.stage
    t, limit = h.finding.time, deadlines.get(stage)
    return now is not None and t is not None and limit is not None and now - t > limit


def due(h: Held, now: float | None, hold_s: float) -> bool:
    """Whether ``h`` has waited its ``hold_s`` at ``now`` (a finding without a time: at once)."""
    t = h.finding.time
    return now is None or t is None or now - t >= hold_s


def never_got_up(st: StreamState) -> bool:
    """The run is still starting: it never got ready or served (a start-up stopped while
    starting - SIGTERM after a hang - never got up either: that is a failure outcome)."""
    return st.status == STARTING


KIND = Kind("outcome", OutcomeRules, runs=5)
