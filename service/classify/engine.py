"""The classifier core: log records in, incident changes out.

Every line is redacted at the door (:mod:`.redaction`), then goes through one chain of
stages assembled in :class:`Classifier`'s constructor (:mod:`.chain`): each stage returns
typed events (:mod:`.events`) that the incident book (:mod:`.incident_book`) applies before
the next stage runs. What the judgements (:mod:`.judgements.registry`) make of the changes
follows, and a restart's failure still undecided is judged once it can be. Kubernetes
evidence (:mod:`.kube`) takes its own short path to the same book; the timer (:meth:`tick`)
asks the judges about every stream. Every stream's state lives in one
:class:`~.tracker.StreamTracker` (the service's pipeline hands it the store to load from, and
writes what it says a batch changed). No FastAPI, Kafka or database here.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from service.classify import chain, kube
from service.classify.events import Found, HeldDue, Judged, Seen, Settle, new_run
from service.classify.findings import Findings, TextModelLike
from service.classify.incident_book import IncidentBook
from service.classify.judgements import crash_loops, outcome, stalls
from service.classify.judgements.registry import Judges
from service.classify.redaction import Blocks
from service.classify.restarts import Restarts
from service.classify.rulebook import RuleBook
from service.classify.rules import RULES_DIR, load_playbook
from service.classify.stream_state import STARTING, StreamState, merge_meta
from service.classify.tracker import NoveltyState, StreamTracker
from service.incidents.incident import Change
from service.records import LogRecord

Stages = tuple[chain.Stage, ...]


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
        self.rules = rules = rulebook or RuleBook()
        playbook = load_playbook(rules.rules_dir if rulebook else RULES_DIR)
        self.model = text_model
        self.tracker = tracker or StreamTracker()
        if novelty is not None:
            self.tracker.novelty = novelty
        self.clock = clock  # service mode: ingestion time when a record carries none
        judgements = rules.judgements
        if stall_deadlines:
            judgements = judgements.override(stalls.KIND, deadlines_s=dict(stall_deadlines))
        if crash_loop_attempts:
            judgements = judgements.override(
                crash_loops.KIND, crash_loop_attempts=crash_loop_attempts
            )
        self.judgements = judgements
        self.judges = Judges(judgements, playbook)
        self.findings = Findings(
            rules, playbook, text_model, self.tracker.novelty, self.tracker.tracks.innermost
        )
        self.restarts = Restarts(self.tracker, self.judges.restarted)
        held = judgements.get(outcome.KIND)
        self.book = IncidentBook(
            rules,
            playbook,
            self.findings,
            self.restarts,
            self.tracker,
            held.hold_s,
            judgements.get(stalls.KIND).deadlines_s,
        )
        self.chain: Stages = (
            chain.QuietServing(rules, self.judges),
            chain.parse,
            chain.Tracebacks(rules, self.tracker.tracks),
            chain.Match(rules),
            chain.RunStart(judgements.get(crash_loops.KIND).gap_s),
            chain.stages,
            chain.ready,
            chain.status,
            chain.Judgements(self.judges),
            chain.Find(
                self.findings,
                hold=held.enabled,
                recovers=held.recovering(),
                ports=held.ports(),
                notices=held.notice_files(),
                deaths=held.dying(),
                engines=held.engine_processes,
            ),
        )
        self.closing: Stages = (chain.settle, chain.Afterwards(self.judges))
        self.evidence_chain: Stages = (
            kube.read,
            chain.Match(rules, last_line=False),
            kube.CrashLoopBackOff(self.judges),
            kube.Find(self.findings),
        )
        self.lines = 0  # lines counted on their streams
        self._secret_blocks: Blocks = OrderedDict()  # streams inside a multi-line secret

    @property
    def stall_deadlines(self) -> Mapping[str, float]:
        return self.judgements.get(stalls.KIND).deadlines_s

    # ---- streams -------------------------------------------------------------------
    def state(self, key: str, meta: Mapping[str, Any] | None = None) -> StreamState:
        """The stream ``key``: in memory, else as saved, else new."""
        return self.tracker.state(key, meta)

    def open_stream(
        self, key: str, meta: Mapping[str, Any] | None = None, time: float | None = None
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
        (:mod:`.redaction`): nothing after this door sees a secret the patterns know. So
        are what its envelope carries (labels, keys and values; tag; names) and its
        stream's name."""
        redactor = self.rules.redactor
        rec.stream = redactor.redact_value(rec.stream)
        rec.text = redactor.redact(rec.text, rec.stream, self._secret_blocks)
        if rec.meta:
            redactor.redact_meta(rec.meta)
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
                self.book.apply(st, new_run(st, rec.time), changes)
            merge_meta(st, meta, self.rules.cuda)
        return changes + self._feed_text(st, rec.text, rec.time)

    def feed_text(self, st: StreamState, text: str, time: float | None = None) -> list[Change]:
        """Classify one plain line of stream ``st`` (redacted first, as :meth:`feed` does)."""
        return self._feed_text(
            st, self.rules.redactor.redact(text, st.key, self._secret_blocks), time
        )

    def _feed_text(self, st: StreamState, text: str, time: float | None) -> list[Change]:
        """The line through the chain and its closing stages; a restart's incident not
        judged yet (same failure again or a new one) stays silent."""
        if time is None and self.clock is not None:
            time = self.clock()
        seen = Seen(st, text, time, prev_time=st.last_time)
        changes = self._through(self.chain, seen, self.closing)
        return [c for c in changes if c.incident.pending_restart is None]

    def _feed_kube(self, rec: LogRecord) -> list[Change]:
        """A Kubernetes evidence record, through its own chain (:mod:`.kube`): classified by
        the signatures only, never moving the stream's stage or status."""
        kube.route(rec, self.tracker.streams)
        meta: dict[str, Any] = dict(rec.meta)
        evidence: dict[str, Any] = meta.pop("kube", None) or {}
        st = self.tracker.state(rec.stream, meta)
        if meta.get("node") != st.meta.get("node") or not st.facts:
            merge_meta(st, meta, self.rules.cuda)
        time = rec.time if rec.time is not None or self.clock is None else self.clock()
        seen = Seen(st, rec.text, time, st.last_time, evidence=evidence)
        return self._through(self.evidence_chain, seen)

    def _through(self, stages: Stages, seen: Seen, closing: Stages = ()) -> list[Change]:
        """``seen`` through ``stages`` (until one takes it whole), then ``closing``: each
        stage's events applied before the next runs. Returns what they changed."""
        seq = seen.st.seq
        st, changes, apply = seen.st, seen.changes, self.book.apply
        for stage in stages:
            events = stage(seen)
            if events:  # (most stages have nothing to say about most lines)
                apply(st, events, changes)
            if seen.done:
                break
        for stage in closing:
            events = stage(seen)
            if events:
                apply(st, events, changes)
        self.lines += seen.st.seq - seq
        return seen.changes

    # ---- the timer and the end of a log ---------------------------------------------
    def tick(self, now: float) -> list[Change]:
        """Timer check: a restart's failure undecided for ``restarts.pending_wait_s`` is
        judged; the judges look at every stream (a startup stuck past its deadline); findings
        held for ``outcome.hold_s`` whose run went on are warnings."""
        wait = self.judgements.get(crash_loops.KIND).pending_wait_s
        changes: list[Change] = []
        for st in list(self.tracker.streams.values()):
            pend = st.pending
            if pend and (pend.since is None or now - pend.since >= wait):
                self.book.apply(st, [Settle(True)], changes)
            self.check_stall(st, now, changes)
            if st.checks.held:
                self.book.apply(st, [HeldDue(now, False)], changes)
        return changes

    def check_stall(self, st: StreamState, now: float, changes: list[Change]) -> None:
        """The judges' word on ``st`` at ``now`` (the service's clock, or the end of an
        offline log / ``--now``): a stall incident when it is stuck in a startup stage."""
        self.book.apply(st, [Judged(j, now) for j in self.judges.tick(st, now)], changes)

    def close_held(self, st: StreamState, changes: list[Change]) -> None:
        """The log ended: findings still held are decided - warnings when the run went on or
        is up, the failure when it ended mid-start-up (:mod:`.judgements.outcome`)."""
        self.book.apply(st, [HeldDue(st.last_time, True)], changes)

    def close_truncated(self, st: StreamState, changes: list[Change]) -> None:
        """The log ended inside a traceback with no exception line (a cut paste): infer what
        its frames support, with a low confidence, rather than nothing. A restart whose
        failure was still undecided is judged now (the log ends with its attempt)."""
        for proc, tb in self.tracker.tracks.take_open(st.key):
            if st.current() is None and not st.shutting_down:
                found = Found(self.findings.truncated(st, proc, tb), None)
                self.book.apply(st, [found], changes)
        seen = Seen(st, "", st.last_time, st.last_time, changes=changes, final=True)
        self._through((), seen, self.closing)
