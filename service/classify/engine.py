"""The classifier core: log records in, incident changes out.

Per line: parse → one rule scan (stages, status markers, facts, signatures) → runs and
stages (:mod:`.runs`) → checks over the stream (:mod:`.judgements.checks`) → the line's
finding (:mod:`.findings`: signature first; the text model only for error-looking lines no
signature explains) → the run's incident (:mod:`.incident_book`: root cause first, cascades
attached; a restarted workload's failure judged by :mod:`.restarts`). Kubernetes evidence
(:mod:`.kube`) and tracebacks (:mod:`.tracebacks`) take their own paths to the same end.
Every stream's state lives in one :class:`~.tracker.StreamTracker` (the service's pipeline
hands it the store to load from, and writes what it says a batch changed). No FastAPI, Kafka
or database here: the CLI, the service and the tests drive this core.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from service.classify import kube, runs
from service.classify.findings import Findings, TextModelLike
from service.classify.incident_book import IncidentBook
from service.classify.judgements import checks
from service.classify.judgements.judgement import Judgement
from service.classify.redaction import Blocks
from service.classify.restarts import Restarts
from service.classify.rulebook import RuleBook
from service.classify.rules import RULES_DIR, load_playbook
from service.classify.stream_state import (
    FAILED,
    READY,
    SERVING,
    STARTING,
    STOPPED,
    StreamState,
    merge_meta,
)
from service.classify.tracebacks import note_frame
from service.classify.tracker import NoveltyState, StreamTracker
from service.incidents.finding import Finding
from service.incidents.incident import Change
from service.incidents.workload import workload_key
from service.parse import line as L
from service.records import LogRecord


class Classifier:
    """Classifies many interleaved streams; one instance per process (not thread-safe).

    ``tracker``: where the streams' state lives (default: memory only); ``novelty``: the
    template miner (kept by the tracker). ``stall_deadlines`` and ``crash_loop_attempts``
    (the settings) win over the rule book's judgements when given."""

    def __init__(
        self,
        rulebook: RuleBook | None = None,
        text_model: TextModelLike | None = None,
        novelty: NoveltyState | None = None,
        tracker: StreamTracker | None = None,
        clock: Callable[[], float] | None = None,
        stall_deadlines: Mapping[str, float] | None = None,
        crash_loop_attempts: int | None = None,
    ) -> None:
        self.rules = rulebook or RuleBook()
        self.playbook = load_playbook(self.rules.rules_dir if rulebook else RULES_DIR)
        self.model = text_model
        self.tracker = tracker or StreamTracker()
        if novelty is not None:
            self.tracker.novelty = novelty
        self.clock = clock  # service mode: ingestion time when a record carries none
        self.judgements = self.rules.judgements
        self.stall_deadlines = stall_deadlines or self.judgements.stalls.deadlines_s
        self.findings = Findings(self.rules, self.playbook, text_model, self.tracker.novelty)
        self.restarts = Restarts(
            self.tracker,
            self.playbook,
            crash_loop_attempts or self.judgements.restarts.crash_loop_attempts,
        )
        self.incidents = IncidentBook(self.rules, self.playbook, self.restarts)
        self._gap_s = self.judgements.restarts.gap_s
        self.lines = 0
        self._prev_time: float | None = None  # time of the stream's line before this one
        self._secret_blocks: Blocks = OrderedDict()  # streams inside a multi-line secret

    # ---- streams -------------------------------------------------------------------
    def state(self, key: str, meta: dict[str, Any] | None = None) -> StreamState:
        """The stream ``key``: in memory, else as saved, else new."""
        return self.tracker.state(key, meta)

    def open_stream(
        self, key: str, meta: dict[str, Any] | None = None, time: float | None = None
    ) -> tuple[StreamState, list[Change]]:
        """The stream ``key`` (created if new) and what its appearance changed: a container
        of a pod that logs was scheduled (its pod's placeholder hands over what it knew)."""
        fresh = key not in self.tracker.streams
        st = self.state(key, meta)
        if fresh and "pod" in st.meta:
            return st, kube.pod_started(st, self.tracker.streams, time)
        return st, []

    def forget(self, keys: Iterable[str]) -> None:
        """Drop in-memory state (e.g. a Kafka partition was revoked)."""
        self.tracker.forget(keys)

    def has_open_traceback(self, key: str) -> bool:
        """Whether a traceback of stream ``key`` has not reached its exception line yet."""
        return self.tracker.tracks.has_open(key)

    # ---- feeding -------------------------------------------------------------------
    def feed(self, rec: LogRecord) -> list[Change]:
        """Classify one record. Its text is redacted first, in place
        (:mod:`.redaction`): nothing after this door sees a secret the patterns know."""
        rec.text = self.rules.redactor.redact(rec.text, rec.stream, self._secret_blocks)
        if "kube" in rec.meta:  # Kubernetes events / pod status (rec.stream may be re-keyed)
            return self._feed_kube(rec)
        st, changes = self.open_stream(rec.stream, rec.meta, rec.time)
        meta = rec.meta
        if meta and (
            meta.get("container_id") != st.meta.get("container_id")
            or meta.get("image") != st.meta.get("image")
            or not st.facts
        ):
            old, new = st.meta.get("container_id"), meta.get("container_id")
            if old and new and old != new and (st.stage is not None or st.status != STARTING):
                # a new container of the same pod (kubelet restarted it): a new run
                self._new_run(st, changes, rec.time)
            merge_meta(st, meta, self.rules.cuda)
        return changes + self._feed_text(st, rec.text, rec.time)

    def feed_text(self, st: StreamState, text: str, time: float | None = None) -> list[Change]:
        """Classify one plain line of stream ``st`` (redacted first, as :meth:`feed` does)."""
        return self._feed_text(
            st, self.rules.redactor.redact(text, st.key, self._secret_blocks), time
        )

    def _feed_text(self, st: StreamState, text: str, time: float | None) -> list[Change]:
        self._prev_time = st.last_time
        changes = self._feed_line(st, text, time)
        if st.pending is not None:
            self._settle(st, changes, final=False)
        if any(c.incident.pending_restart is not None for c in changes):
            # a restart's incident not judged yet (same failure again or a new one): silent
            changes = [c for c in changes if c.incident.pending_restart is None]
        return changes

    def _count(self, st: StreamState, time: float | None) -> None:
        self.lines += 1
        st.seq += 1
        if time is not None:
            st.last_time = time

    def _feed_line(self, st: StreamState, text: str, time: float | None) -> list[Change]:
        if time is None and self.clock is not None:
            time = self.clock()
        changes: list[Change] = []
        if st.stage == "serving" and not st.shutting_down:
            if "Avg prompt throughput" in text:  # steady state: a stats line
                self._count(st, time)
                self._judged(
                    st, checks.serving_stats(st, text, self.judgements.serving), time, changes
                )
                return changes
            if not self.rules.worth_a_look(text):  # an access line with nothing that matters
                self._count(st, time)
                return changes
        line = L.parse_line(text)
        if line.kind == L.EMPTY:
            return changes
        self._count(st, time)
        if time is not None and st.first_time is None:
            st.first_time = time
        if line.kind in (L.FRAME, L.CODE, L.CHAIN, L.PROCESS, L.TRACEBACK):
            changes = self._refined(st, line)
            self._traceback_line(st, line)
            self.incidents.note(st, line)
            return changes

        self.tracker.tracks.close((st.key, line.proc_key))
        st.last_line = line.text
        hits = self.rules.scan(line.message)
        # (pids are read on lines some rule looks at: the block scanner feeds only those)
        looked_at = bool(
            hits.stages
            or hits.facts
            or hits.signatures
            or hits.ready
            or hits.serving
            or hits.shutdown
        )
        if (
            hits.run_start
            or (
                looked_at
                and runs.restart_signal(
                    st, line, bool(hits.stages), time, self._prev_time, self._gap_s
                )
            )
        ) and runs.is_new_run(st):
            self._new_run(st, changes, time)
        if (
            looked_at
            and line.process == "APIServer"
            and line.pid is not None
            and st.checks.api_pid is None
        ):
            st.checks.api_pid = line.pid
        for stage in hits.stages:
            self._advance(st, stage, time, changes)
        if hits.ready and st.status in (STARTING, FAILED) and not st.shutting_down:
            self._advance(st, "api_server", time, changes)
            st.status = READY
            st.last_good_facts = dict(st.facts)
            self._remember_good(st)
            self._resolve_passed(st, time, changes, ready=True)
            self._judged(
                st,
                checks.startup(st, line, self.judgements.prefix_caching.off_by_default),
                time,
                changes,
            )
        if hits.serving and not st.shutting_down and st.status != SERVING:
            self._advance(st, "serving", time, changes)
            if st.status in (STARTING, READY):
                st.status = SERVING
        if hits.shutdown:
            st.shutting_down = True
            if line.message.startswith(
                ("Application shutdown complete", "Finished server process")
            ):
                st.status = STOPPED if st.status != FAILED else FAILED
        for name, value in hits.facts:
            st.facts.setdefault(name, value)
        if hits.serving and "throughput" in line.message and not st.shutting_down:
            stats = checks.serving_stats(st, line.text, self.judgements.serving)
            self._judged(st, stats, time, changes)
        if st.status == STARTING and not st.shutting_down and not hits.stages:
            wait = checks.waiting(
                st, line, time, self.judgements.waiting, self.judgements.stalls.categories
            )
            self._judged(st, [wait], time, changes)
        finding = (
            None
            if hits.benign and not hits.signatures
            else self.findings.of_line(st, line, hits.signatures, time)
        )
        self._conclude(st, line, finding, changes)
        return changes

    def _remember_good(self, st: StreamState) -> None:
        """The run got ready: its facts are its workload's last good ones."""
        workload = self.tracker.workload(workload_key(st.key, st.meta))
        workload.last_good = st.last_good_facts
        self.tracker.changed(workload.key)

    def _traceback_line(self, st: StreamState, line: L.Line) -> None:
        """A line of a traceback: the frames and code of the open one, a chain, a start."""
        where = (st.key, line.proc_key)
        if line.kind == L.CHAIN:
            self.tracker.tracks.chain(where)
        elif line.kind == L.TRACEBACK:
            if not self.tracker.tracks.start(where):  # a chained block: the first's frames count
                st.frame_hint.pop(line.proc_key, None)
        else:
            self.tracker.tracks.line(where, line.message.strip())

    def _refined(self, st: StreamState, line: L.Line) -> list[Change]:
        """A frame hinting a stage refines the finding of its process still open to it."""
        hint = self.rules.frame_stage.get(line.func or "") if line.kind == L.FRAME else None
        if not hint:
            return []
        stage = note_frame(st, line.proc_key, hint)
        target = self.tracker.tracks.refining.get((st.key, line.proc_key))
        return self.findings.refine(*target, stage) if target else []

    def _conclude(
        self, st: StreamState, line: L.Line, finding: Finding | None, changes: list[Change]
    ) -> None:
        """A line's finding goes to its incident (later frames may still refine it); a line
        without one is evidence of the open incident."""
        if finding is None:
            self.incidents.note(st, line)
            return
        inc = self.incidents.attach(st, finding, changes)
        self.tracker.tracks.watch((st.key, line.proc_key), finding, inc)

    def _feed_kube(self, rec: LogRecord) -> list[Change]:
        """A Kubernetes evidence record: classified by the signatures only, never moving the
        stream's stage or status (:mod:`service.classify.kube`)."""
        kube.route(rec, self.tracker.streams)
        meta = dict(rec.meta)
        evidence: dict[str, Any] = meta.pop("kube", None) or {}
        st = self.state(rec.stream, meta)
        if meta.get("node") != st.meta.get("node") or not st.facts:
            merge_meta(st, meta, self.rules.cuda)
        time = rec.time
        if time is None and self.clock is not None:
            time = self.clock()
        line = kube.read(st, evidence, rec.text, time)
        if line is None:
            return []
        self.lines += 1
        sigs = self.rules.scan(line.message).signatures
        confirmed = kube.crash_loop_backoff(st, line, sigs, self.playbook, time)
        if confirmed is not None:
            return confirmed
        changes: list[Change] = []
        finding = self.findings.of_line(st, line, sigs, time) if sigs else None
        if finding is not None:
            self.incidents.attach(st, finding, changes)
        else:
            self.incidents.note(st, line)
        return changes

    # ---- runs, stages, restarts ------------------------------------------------------
    def _new_run(self, st: StreamState, changes: list[Change], time: float | None = None) -> None:
        if st.pending is not None:  # the previous attempt ended without its root cause
            self._settle(st, changes, final=True)
        runs.new_run(st, time)
        merge_meta(st, st.meta, self.rules.cuda)

    def _advance(
        self, st: StreamState, stage: str, time: float | None, changes: list[Change]
    ) -> None:
        if runs.advance(st, stage, time, changes):
            self._resolve_passed(st, time, changes)

    def _resolve_passed(
        self, st: StreamState, time: float | None, changes: list[Change], ready: bool = False
    ) -> None:
        replaced = self.restarts.replaced_priors(st)
        runs.resolve_passed(st, time, changes, replaced, self.tracker.find, ready)

    def _settle(self, st: StreamState, changes: list[Change], final: bool) -> None:
        folded = self.restarts.settle(st, changes, final)
        if folded is not None:
            self.tracker.tracks.repoint(*folded)

    # ---- judgements beyond single lines ------------------------------------------------
    def _judged(
        self,
        st: StreamState,
        judgements: Iterable[Judgement | None],
        time: float | None,
        changes: list[Change],
    ) -> None:
        for j in judgements:
            if j is None:
                continue
            self.incidents.attach(st, self.findings.judged(st, j, time), changes)
            inc = st.current() if j.stall else None
            if inc is not None:
                inc.extra["stall"] = True

    def tick(self, now: float) -> list[Change]:
        """Timer check: open a stall incident for every startup stuck past its deadline."""
        changes: list[Change] = []
        for st in list(self.tracker.streams.values()):
            pend = st.pending
            if pend and (
                pend.since is None or now - pend.since >= self.judgements.restarts.pending_wait_s
            ):
                self._settle(st, changes, final=True)
            self.check_stall(st, now, changes)
        return changes

    def check_stall(self, st: StreamState, now: float, changes: list[Change]) -> None:
        """Open a stall incident when ``st`` is stuck in a startup stage past its deadline
        at ``now`` (the service's clock, or the end of an offline log / ``--now``)."""
        stall = checks.stall(st, now, self.stall_deadlines, self.judgements.stalls)
        self._judged(st, [stall], now, changes)

    def close_truncated(self, st: StreamState, changes: list[Change]) -> None:
        """The log ended inside a traceback with no exception line (a cut paste): infer what
        its frames support, with a low confidence, rather than nothing. A restart whose
        failure was still undecided is judged now (the log ends with its attempt)."""
        for proc, tb in self.tracker.tracks.take_open(st.key):
            if st.current() is None and not st.shutting_down:
                self.incidents.attach(st, self.findings.truncated(st, proc, tb), changes)
        if st.pending is not None:
            self._settle(st, changes, final=True)
