"""The stages a line goes through, each a small unit: it reads the line (:class:`~.events.Seen`)
and the stream's state and returns typed events (:mod:`.events`) - it never changes an
incident, and never calls another stage. The classifier assembles them once, in order
(``Classifier.__init__``), and applies what each returns through the incident book before
the next one runs:

quiet serving lines → parse → tracebacks → match → run start → stages → ready → status
→ judgements → finding (:class:`Find`); then, whatever a stage took, the closing ones: a
restart's undecided failure settled (:func:`settle`), the judgements over the line's
incident changes (:class:`Afterwards`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

from service.classify import events as ev
from service.classify import runs
from service.classify.findings import Findings
from service.classify.judgements import outcome
from service.classify.judgements.registry import Judges
from service.classify.rulebook import RuleBook
from service.classify.stream_state import FAILED, SERVING, STARTING, StreamState
from service.classify.tracebacks import ProcessTracks
from service.parse import line as L

TRACEBACK_KINDS = (L.FRAME, L.CODE, L.CHAIN, L.PROCESS, L.TRACEBACK)
STOPPED_WORDS = ("Application shutdown complete", "Finished server process")


class Stage(Protocol):
    def __call__(self, seen: ev.Seen) -> Sequence[ev.Event]: ...


class QuietServing:
    """A serving stream's steady state, without a parse: a stats line goes to the judges
    only, a line no rule would look at is counted and left."""

    def __init__(self, rules: RuleBook, judges: Judges) -> None:
        self.rules = rules
        self.judges = judges

    def __call__(self, seen: ev.Seen) -> Sequence[ev.Event]:
        st = seen.st
        if st.stage != "serving" or st.shutting_down or st.checks.held:
            return ()  # (a held finding waits for what the run does next: read it all)
        if "Avg prompt throughput" in seen.text:
            seen.done = True
            judged = self.judges.line(st, seen)
            return [ev.Counted(seen.time, opens=False), *(ev.Judged(j, seen.time) for j in judged)]
        if not self.rules.worth_a_look(seen.text):
            seen.done = True
            return [ev.Counted(seen.time, opens=False)]
        return ()


def parse(seen: ev.Seen) -> Sequence[ev.Event]:
    """The line's kind, level, process and message; an empty line is not counted."""
    seen.line = L.parse_line(seen.text)
    if seen.line.kind == L.EMPTY:
        seen.done = True
        return ()
    return [ev.Counted(seen.time)]


class Tracebacks:
    """A traceback's lines (frames, code, a chain, its start) are its process's: a frame of
    the frame map (:mod:`.frames`) changes what the traceback hints and refines the finding
    still open to it; the rest is evidence. Any other line of the process ends its open
    traceback."""

    def __init__(self, rules: RuleBook, tracks: ProcessTracks) -> None:
        self.frames = rules.frames
        self.tracks = tracks

    def __call__(self, seen: ev.Seen) -> Sequence[ev.Event]:
        st, line = seen.st, seen.line
        assert line is not None
        where = (st.key, line.proc_key)
        if line.kind not in TRACEBACK_KINDS:
            self.tracks.close(where)
            return ()
        seen.done = True
        out: list[ev.Event] = []
        hint = self.frames.stage_of(line.func, line.path) if line.kind == L.FRAME else None
        now = self.tracks.frame(where, hint) if hint else None
        if now is not None and now != st.frame_hint.get(line.proc_key):
            out.append(ev.FrameHint(line.proc_key, now))
            target = self.tracks.refining.get(where)
            if target:
                out.append(ev.Refined(target[0], target[1], now))
        if line.kind == L.CHAIN:
            self.tracks.chain(where)
        elif line.kind == L.TRACEBACK:
            if not self.tracks.start(where):  # a chained block: the first's frames count
                out.append(ev.FrameHint(line.proc_key, None))
        else:
            self.tracks.line(where, line.message.strip())
        out.append(ev.Noted(line.text))
        return out


class Match:
    """One rule scan of the message: stages, status markers, facts, signatures; the line is
    the stream's latest (``last_line``; not a Kubernetes evidence line, whose signatures are
    all that is read of it)."""

    def __init__(self, rules: RuleBook, last_line: bool = True) -> None:
        self.rules = rules
        self.last_line = last_line

    def __call__(self, seen: ev.Seen) -> Sequence[ev.Event]:
        assert seen.line is not None
        seen.hits = self.rules.scan(seen.line.message)
        return [ev.LastLine(seen.line.text)] if self.last_line else ()


class RunStart:
    """A new run: a banner, or (on a line some rule looks at) another API server process or
    a start marker after a failed or stopped run went quiet (``gap_s``)."""

    def __init__(self, gap_s: float) -> None:
        self.gap_s = gap_s

    def __call__(self, seen: ev.Seen) -> Sequence[ev.Event]:
        st, line, hits = seen.st, seen.line, seen.hits
        assert line is not None
        looked_at = hits.looked_at()
        out: list[ev.Event] = []
        if (
            hits.run_start
            or (
                looked_at
                and runs.restart_signal(
                    st, line, bool(hits.stages), seen.time, seen.prev_time, self.gap_s
                )
            )
        ) and runs.is_new_run(st):
            out += ev.new_run(st, seen.time)
        if looked_at and line.process == "APIServer" and line.pid is not None:
            out.append(ev.ApiServer(line.pid))
        return out


def stages(seen: ev.Seen) -> Sequence[ev.Event]:
    """The startup stages the line marks."""
    return [ev.Reached(stage, seen.time) for stage in seen.hits.stages]


def ready(seen: ev.Seen) -> Sequence[ev.Event]:
    """The API server is up (a starting run's, or a failed run's that recovered)."""
    st = seen.st
    if seen.hits.ready and st.status in (STARTING, FAILED) and not st.shutting_down:
        seen.ready = True
        return [ev.Reached("api_server", seen.time), ev.Ready(seen.time)]
    return ()


def status(seen: ev.Seen) -> Sequence[ev.Event]:
    """Serving, shutting down (stopped when the server says it finished), facts."""
    st, hits = seen.st, seen.hits
    assert seen.line is not None
    out: list[ev.Event] = []
    if hits.serving and not st.shutting_down and st.status != SERVING:
        out += [ev.Reached("serving", seen.time), ev.Serving()]
    if hits.shutdown:
        out.append(ev.ShuttingDown(seen.line.message.startswith(STOPPED_WORDS)))
    if hits.facts:
        out.append(ev.Facts(tuple(hits.facts)))
    return out


class Judgements:
    """What the registered judges make of the line (:mod:`.judgements.registry`)."""

    def __init__(self, judges: Judges) -> None:
        self.judges = judges

    def __call__(self, seen: ev.Seen) -> Sequence[ev.Event]:
        return [ev.Judged(j, seen.time) for j in self.judges.line(seen.st, seen)]


class Find:
    """The line's finding (:mod:`.findings`), or the line as evidence of the open incident
    (a benign line no signature explains has none). A finding not fatal by itself, in a run
    that has not failed, waits for the run's outcome (``hold``: block ``outcome`` enabled;
    :mod:`.judgements.outcome`)."""

    def __init__(
        self,
        findings: Findings,
        hold: bool = True,
        recovers: re.Pattern[str] | None = None,
        ports: outcome.Ports | None = None,
        notices: re.Pattern[str] | None = None,
        deaths: re.Pattern[str] | None = None,
        engines: str = "",
    ) -> None:
        self.findings = findings
        self.hold = hold
        self.recovers = recovers  # wordings of a line whose program recovers (block outcome)
        self.ports = ports  # a server's bind failure and bind, by port (block outcome)
        self.notices = notices  # files of a subsystem whose notices are probes (block outcome)
        self.deaths = deaths  # an exception saying a process died is an outcome (block outcome)
        self.engines = engines  # the engine's own process names (block outcome)

    def __call__(self, seen: ev.Seen) -> Sequence[ev.Event]:
        st, line, hits = seen.st, seen.line, seen.hits
        assert line is not None
        bound = self._bound(st, line)
        if seen.hits.serving and any(h.work for h in st.checks.held):
            bound.append(ev.Worked())
        found = (
            None
            if hits.benign and not hits.signatures
            else self.findings.of_line(st, line, hits.signatures, seen.time)
        )
        if found is None:
            return [*bound, ev.Noted(line.text)]
        if self.hold and st.current() is None:
            rules = self.findings.rules
            sig = (
                rules.signature(found.rule) if found.method == "signature" and found.rule else None
            )
            back = self.recovers is not None and self.recovers.search(line.message) is not None
            port = self.ports.failed(line) if self.ports is not None else None
            if port is not None and found.role != "warning":  # a bind that may be retried
                return [ev.Hold(found, line.proc_key, False, port)]
            if found.role != "warning" and outcome.caught(
                line, self.deaths, self.engines, st.status == SERVING
            ):
                return [ev.Hold(found, line.proc_key, False, work=True)]  # did the run go on?
            if found.role != "warning" and outcome.subsystem_notice(line, self.notices):
                return [ev.Hold(found, line.proc_key, True)]  # a probe: never the root cause
            if outcome.needs_outcome(found, line, sig, back):
                return [ev.Hold(found, line.proc_key, outcome.yields(found, line, sig, back))]
        return [*bound, ev.Found(found, line.proc_key)]

    def _bound(self, st: StreamState, line: L.Line) -> list[ev.Event]:
        """A server bound a port a held bind failure of the run names: it recovered."""
        if self.ports is None or not any(h.port is not None for h in st.checks.held):
            return []
        port = self.ports.bound(line.message)
        return [] if port is None else [ev.Bound(port)]


def settle(seen: ev.Seen) -> Sequence[ev.Event]:
    """A restart's failure still undecided is judged if it can be now (its root cause is
    known, or the stream's input ended)."""
    return [ev.Settle(seen.final)] if seen.st.pending is not None else ()


class Afterwards:
    """What the registered judges make of the incident changes of the line."""

    def __init__(self, judges: Judges) -> None:
        self.judges = judges

    def __call__(self, seen: ev.Seen) -> Sequence[ev.Event]:
        return [ev.Judged(j, seen.time) for j in self.judges.after(seen.st, seen.changes)]
