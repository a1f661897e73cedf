"""The classifier core: log records in, incident changes out.

Per line: parse → one rule scan (stages, status markers, facts, signatures) → stage and
status tracking → a finding (signature first; the text model only for error-looking lines
no signature explains) → the run's incident (root cause first, cascades attached).
No FastAPI, Kafka or database here: the CLI, the service and the tests drive this core.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from service.classify import restarts
from service.classify.facts import explain_compatibility
from service.classify.finding import Finding
from service.classify.incident import Incident
from service.classify.judgements import serving, stalls
from service.classify.judgements.playbook import playbook_for, restart_advice, warning_advice
from service.classify.masking import mask
from service.classify.rulebook import RuleBook
from service.classify.rules import RULES_DIR, Signature, load_playbook
from service.classify.stream_state import FAILED, READY, SERVING, STARTING, STOPPED, StreamState
from service.classify.workload import diff_facts, restart_unit, workload_key
from service.metrics import DISAGREEMENTS
from service.parse import line as L
from service.records import LogRecord
from service.taxonomy import STAGE_INDEX, later_stage, tier_of

# Exceptions that are not failures in themselves.
BENIGN_EXC = frozenset(
    {
        "KeyboardInterrupt",
        "SystemExit",
        "GeneratorExit",
        "CancelledError",
        "asyncio.exceptions.CancelledError",
        "asyncio.CancelledError",
        "StopIteration",
    }
)
MODEL_PRIORITY = 35
UNKNOWN_PRIORITY = 10
COMPAT_TIER = "compatibility"


class TextModelLike(Protocol):
    def predict(self, text: str) -> Any: ...


class NoveltyLike(Protocol):
    def observe(self, text: str) -> tuple[str, bool]: ...


@dataclass(slots=True)
class Change:
    """An incident changed: ``opened``, ``updated`` (root cause changed, or it became a
    crash loop), ``resolved``, or ``evidence`` (more lines attached, or one more restart that
    failed the same way; stored, not notified). ``also``: other streams whose state the
    change touched (an incident that followed its workload from a replaced pod)."""

    kind: str
    incident: Incident
    also: tuple[str, ...] = ()


# Lines of other programs (runtimes, kernel, transports, C++ services) that print no level:
# these words send them to the text model, which abstains on what it does not know.
_FAILURE_WORDS = re.compile(
    r"\b(?:fail(?:ed|ure|s)?|errors?|fatal|cannot|can't|unable to|refused|denied|killed|"
    r"segmentation fault|core dumped|abort(?:ed|ing)?|panic|timed out|out of memory|"
    r"no such file|not found|mismatch|invalid|exception|xid)\b",
    re.IGNORECASE,
)
# "waiting for ..." repeated this often in one stage, over at least this long when the lines
# carry times, is a stall even before the stage's deadline (Ray placement, rendezvous, peers)
_WAITING = re.compile(
    r"\b(?:waiting for|still waiting|waiting on|wait for .{0,40} to "
    r"(?:start|connect|join|be ready))\b",
    re.IGNORECASE,
)
WAIT_REPEATS = 5
WAIT_MIN_SPAN_S = 120.0
MAX_WORKLOADS = 100_000  # last-good facts kept in memory (least recently started go first)
# Restarts. A run that starts this many seconds after the previous line of a failed or
# stopped stream, with a stage marker, is a new run even without a banner (kubelet waits at
# least 10 s before restarting a container; vLLM takes seconds to import before its first line)
RESTART_GAP_S = 5.0
# a restart whose first finding says nothing definite (a cascade such as "EngineCore failed
# to start", an unknown error) waits for its root cause this long before it is judged the
# same failure again (the service's timer; offline: the end of the log)
PENDING_MAX_S = 60.0
CRASH_LOOP_ATTEMPTS = 3  # failed starts of one workload, the same way, that make a crash loop
MAX_ATTEMPTS_KEPT = 20  # attempts listed in an incident's timeline (the count goes on)


class Classifier:
    """Classifies many interleaved streams; one instance per process (not thread-safe)."""

    def __init__(
        self,
        rulebook: RuleBook | None = None,
        text_model: TextModelLike | None = None,
        novelty: NoveltyLike | None = None,
        state_loader: Callable[[str], StreamState | None] | None = None,
        clock: Callable[[], float] | None = None,
        stall_deadlines: dict[str, float] | None = None,
        crash_loop_attempts: int = CRASH_LOOP_ATTEMPTS,
    ) -> None:
        self.rules = rulebook or RuleBook()
        self.playbook = load_playbook(self.rules.rules_dir if rulebook else RULES_DIR)
        self.model = text_model
        self.novelty = novelty
        self.state_loader = state_loader
        self.clock = clock  # service mode: ingestion time when a record carries none
        self.stall_deadlines = stall_deadlines or stalls.DEFAULT_DEADLINES_S
        self.last_good: dict[str, dict[str, str]] = {}  # workload → facts of its last good start
        self.crash_loop_attempts = max(2, int(crash_loop_attempts))
        # restart unit (workload on a node) → {open critical incident id: its stream}, so a
        # replacement pod's failure continues its predecessor's incident (memory only)
        self.units: dict[str, dict[str, str]] = {}
        self._prev_time: float | None = None  # time of the stream's line before this one
        self.streams: dict[str, StreamState] = {}
        # tracebacks not ended by an exception line yet (process → their frame/code lines),
        # and processes whose next traceback is chained to the previous one
        self._open_tb: dict[tuple[str, str], list[str]] = {}
        self._chained: set[tuple[str, str]] = set()
        # finding whose stage later traceback frames of the same process may still refine
        self._refine: dict[tuple[str, str], tuple[Finding, Incident | None]] = {}
        self.lines = 0
        self.model_calls = 0
        self.disagreements = 0

    # ---- streams -------------------------------------------------------------------
    def state(self, key: str, meta: dict[str, Any] | None = None) -> StreamState:
        st = self.streams.get(key)
        if st is None:
            st = self.state_loader(key) if self.state_loader else None
            if st is None:
                st = StreamState(key=key, meta=dict(meta or {}))
                st.last_good_facts = self.last_good.get(workload_key(key, st.meta))
            self.streams[key] = st
        return st

    def open_stream(
        self, key: str, meta: dict[str, Any] | None = None, time: float | None = None
    ) -> tuple[StreamState, list[Change]]:
        """The stream ``key`` (created if new) and what its appearance changed: a container
        of a pod that logs was scheduled (its pod's placeholder hands over what it knew)."""
        fresh = key not in self.streams
        st = self.state(key, meta)
        if fresh and "pod" in st.meta:
            from service.classify import kube

            return st, kube.pod_started(self, st, time)
        return st, []

    def _remember_good(self, workload: str, facts: dict[str, str]) -> None:
        """Facts of a workload's last good start; the oldest workloads go past the cap."""
        self.last_good.pop(workload, None)
        self.last_good[workload] = facts
        while len(self.last_good) > MAX_WORKLOADS:
            del self.last_good[next(iter(self.last_good))]

    def forget(self, keys: Iterable[str]) -> None:
        """Drop in-memory state (e.g. a Kafka partition was revoked)."""
        gone = set(keys)
        for k in gone:
            self.streams.pop(k, None)
        for key in [k for k in self._refine if k[0] in gone]:
            del self._refine[key]
        for key in [k for k in self._open_tb if k[0] in gone]:
            del self._open_tb[key]
        self._chained = {k for k in self._chained if k[0] not in gone}

    # ---- feeding -------------------------------------------------------------------
    def feed(self, rec: LogRecord) -> list[Change]:
        if "kube" in rec.meta:  # Kubernetes events / pod status (rec.stream may be re-keyed)
            from service.classify import kube

            return kube.feed(self, rec)
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
            _merge_meta(st, meta, self.rules)
        return changes + self.feed_text(st, rec.text, rec.time)

    def feed_text(self, st: StreamState, text: str, time: float | None = None) -> list[Change]:
        self._prev_time = st.last_time
        changes = self._feed_line(st, text, time)
        if st.extra.get("pending"):
            self._settle(st, changes, final=False)
        if any("pending_restart_of" in c.incident.extra for c in changes):
            # a restart's incident not judged yet (same failure again or a new one): silent
            changes = [c for c in changes if "pending_restart_of" not in c.incident.extra]
        return changes

    def _feed_line(self, st: StreamState, text: str, time: float | None) -> list[Change]:
        if time is None and self.clock is not None:
            time = self.clock()
        if st.stage == "serving" and not st.shutting_down:
            if "Avg prompt throughput" in text:  # steady state: a stats line
                self.lines += 1
                st.seq += 1
                if time is not None:
                    st.last_time = time
                changes: list[Change] = []
                self._stats_checks(st, text, time, changes)
                return changes
            if not self.rules.worth_a_look(text):  # an access line with nothing that matters
                self.lines += 1
                st.seq += 1
                if time is not None:
                    st.last_time = time
                return []
        line = L.parse_line(text)
        if line.kind == L.EMPTY:
            return []
        self.lines += 1
        st.seq += 1
        if time is not None:
            st.last_time = time
            if st.first_time is None:
                st.first_time = time
        changes: list[Change] = []
        kind = line.kind

        where = (st.key, line.proc_key)
        if kind == L.FRAME:
            hint = self.rules.frame_stage.get(line.func or "")
            if hint:
                self._frame_hint(st, line.proc_key, hint, changes)
            self._tb_line(where, line)
            self._note(st, line, changes)
            return changes
        if kind in (L.CODE, L.CHAIN, L.PROCESS):
            if kind == L.CHAIN:
                self._refine.pop(where, None)
                self._chained.add(where)
            else:
                self._tb_line(where, line)
            self._note(st, line, changes)
            return changes
        if kind == L.TRACEBACK:
            if where in self._chained:  # a chained block: the first block's frames still count
                self._chained.discard(where)
            else:
                st.frame_hint.pop(line.proc_key, None)
            self._open_tb[where] = []
            self._note(st, line, changes)
            return changes

        self._open_tb.pop(where, None)
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
            or (looked_at and self._restart_signal(st, line, bool(hits.stages), time))
        ) and self._is_new_run(st):
            self._new_run(st, changes, time)
        if looked_at and line.process == "APIServer" and line.pid is not None:
            st.extra.setdefault("api_pid", line.pid)
        if hits.stages:
            for stage in hits.stages:
                self._advance(st, stage, time, changes)
        if hits.ready and st.status in (STARTING, FAILED) and not st.shutting_down:
            self._advance(st, "api_server", time, changes)
            st.status = READY
            st.last_good_facts = dict(st.facts)
            self._remember_good(workload_key(st.key, st.meta), st.last_good_facts)
            self._resolve_passed(st, time, changes, ready=True)
            self._startup_checks(st, line, time, changes)
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
            self._stats_checks(st, line.text, time, changes)

        if (
            st.status == STARTING
            and not st.shutting_down
            and not hits.stages
            and _WAITING.search(line.message[:300])
        ):
            self._waiting(st, line, time, changes)
        finding = (
            None
            if hits.benign and not hits.signatures
            else self._finding(st, line, hits.signatures, time)
        )
        if finding is not None:
            inc = self._attach(st, finding, changes)
            self._refine[(st.key, line.proc_key)] = (finding, inc)
        else:
            self._note(st, line, changes)
        return changes

    # ---- stages and runs -----------------------------------------------------------
    @staticmethod
    def _is_new_run(st: StreamState) -> bool:
        if st.status in (FAILED, STOPPED):
            return True
        if st.stage is None:
            return False
        return st.status != STARTING or STAGE_INDEX[st.stage] >= STAGE_INDEX["distributed_init"]

    def _restart_signal(
        self, st: StreamState, line: L.Line, stage_marker: bool, time: float | None
    ) -> bool:
        """A new run without a banner: another API server process (a new pid), or a startup
        stage marker after a failed or stopped run went quiet (a later start)."""
        pid = st.extra.get("api_pid")
        if line.process == "APIServer" and pid is not None and line.pid not in (None, pid):
            return True
        if not stage_marker or st.status not in (FAILED, STOPPED):
            return False
        prev = self._prev_time
        return st.status == STOPPED or (
            prev is not None and time is not None and time - prev >= RESTART_GAP_S
        )

    def _new_run(self, st: StreamState, changes: list[Change], time: float | None = None) -> None:
        if st.extra.get("pending"):  # the previous attempt ended without its root cause
            self._settle(st, changes, final=True)
        st.run += 1
        st.stage = None
        st.timeline = {}
        st.status = STARTING
        st.shutting_down = False
        st.frame_hint = {}
        st.facts = {}
        st.first_time = time  # else the run's first line with a time
        for key in ("stats", "waiting", "api_pid"):  # per-run state of the checks
            st.extra.pop(key, None)
        _merge_meta(st, st.meta, self.rules)

    def _advance(
        self, st: StreamState, stage: str, time: float | None, changes: list[Change]
    ) -> None:
        if st.stage is not None and STAGE_INDEX[stage] <= STAGE_INDEX[st.stage]:
            return
        # Skipped stages are implied (a log never says every marker).
        start = STAGE_INDEX[st.stage] + 1 if st.stage else STAGE_INDEX[stage]
        for s in list(STAGE_INDEX)[start : STAGE_INDEX[stage] + 1]:
            st.timeline.setdefault(s, time if time is not None else st.seq)
        st.stage = stage
        st.last_stage_change = time
        for inc in list(st.incidents):
            if (
                inc.run == st.run
                and inc.status == "open"
                and stalls.is_stall(inc.primary.rule)
                and STAGE_INDEX[stage] > STAGE_INDEX[inc.stage]
            ):
                inc.status, inc.resolved_at = "resolved", time
                inc.resolution = f"the stream moved on to {stage}"
                st.incidents.remove(inc)
                if st.status == FAILED:
                    st.status = STARTING
                changes.append(Change("resolved", inc))
        self._resolve_passed(st, time, changes)

    def _resolve_passed(
        self, st: StreamState, time: float | None, changes: list[Change], ready: bool = False
    ) -> None:
        """A later run (of this pod, or of the pod that replaced it) that gets past the
        failing stage resolves the incident."""
        mine = [i for i in st.incidents if i.run < st.run and "pending_restart_of" not in i.extra]
        for inc in mine + self._replaced_priors(st):
            if inc.status != "open" or inc.severity != "critical":
                continue
            failed_at = later_stage(inc.stage, inc.extra.get("reached")) or inc.stage
            if ready or (st.stage and STAGE_INDEX[st.stage] > STAGE_INDEX[failed_at]):
                inc.status = "resolved"
                inc.resolved_at = time
                who = (
                    "the workload"
                    if inc.stream == st.key
                    else f"the workload (pod {st.meta.get('pod') or st.key})"
                )
                inc.resolution = f"run {st.run} of {who} got past {inc.stage}" + (
                    " and is ready" if ready else f" (reached {st.stage})"
                )
                owner = st if inc.stream == st.key else self.streams.get(inc.stream)
                if owner is not None and inc in owner.incidents:
                    owner.incidents.remove(inc)
                changes.append(Change("resolved", inc))

    # ---- findings ------------------------------------------------------------------
    def _finding(
        self, st: StreamState, line: L.Line, sigs: list[tuple[Signature, Any]], time: float | None
    ) -> Finding | None:
        hint = st.frame_hint.get(line.proc_key)
        if sigs and line.level is not None:
            sigs = [h for h in sigs if h[0].levels is None or line.level in h[0].levels]
        if sigs:
            sig = sigs[0][0]
            if st.shutting_down and sig.role in ("cascade", "symptom", "warning"):
                return None
            stage, source = self._stage_for(
                st, sig.category, sig.stage, sig.default_stage, hint, line
            )
            if sig.min_stage and source != "rule":
                stage = later_stage(stage, sig.min_stage) or stage
            category = sig.category_by_stage.get(stage, sig.category)
            if self.model is not None and sig.role == "cause" and self._error_like(line):
                self._check_disagreement(line, category)
            return Finding(
                tier=tier_of(category),
                category=category,
                stage=stage,
                confidence=sig.confidence,
                method="signature",
                rule=sig.id,
                line=line.text,
                role=sig.role,
                priority=sig.priority,
                seq=st.seq,
                time=time,
                process=line.process,
                remediation=sig.remediation or self._first_move(category),
                stage_source=source,
            )
        strength = self._error_like(line)
        if strength is None or st.shutting_down:
            return None
        template, novel = (
            self.novelty.observe(line.message) if self.novelty else (mask(line.message), False)
        )
        if self.model is not None:
            self.model_calls += 1
            pred = self.model.predict(line.message)
            template = getattr(pred, "template", None) or template
            cat = pred.category
            if cat not in ("healthy", "unknown"):
                stage, source = self._stage_for(st, cat, None, None, hint, line)
                return Finding(
                    tier=tier_of(cat),
                    category=cat,
                    stage=stage,
                    confidence=float(pred.probability),
                    method="model",
                    rule=None,
                    line=line.text,
                    role="symptom",
                    priority=MODEL_PRIORITY,
                    seq=st.seq,
                    time=time,
                    process=line.process,
                    remediation=self._first_move(cat),
                    template=template,
                    novel=novel,
                    stage_source=source,
                )
            if cat == "healthy":
                return None
        if strength != "exception":
            return None
        stage, source = self._stage_for(st, "unknown", None, None, hint, line)
        return Finding(
            tier="other",
            category="unknown",
            stage=stage,
            confidence=0.3,
            method="heuristic",
            rule=None,
            line=line.text,
            role="symptom",
            priority=UNKNOWN_PRIORITY,
            seq=st.seq,
            time=time,
            process=line.process,
            remediation=self._first_move("unknown"),
            template=template,
            novel=novel,
            stage_source=source,
        )

    @staticmethod
    def _error_like(line: L.Line) -> str | None:
        """``exception`` for exception lines, ``error`` for ERROR-level lines, else None."""
        if line.kind == L.EXCEPTION:
            return None if line.exc in BENIGN_EXC else "exception"
        if line.level in ("ERROR", "CRITICAL") and line.kind in (
            L.VLLM,
            L.PLAIN,
            L.TORCH,
            L.NCCL,
            L.UVICORN,
        ):
            return "error"
        if line.kind == L.NCCL and line.level == "WARNING":
            return "error"
        if (
            line.kind == L.PLAIN
            and line.level is None
            and _FAILURE_WORDS.search(line.message[:300])
        ):
            return "error"  # another program's failure without a level: the model decides
        return None

    def _check_disagreement(self, line: L.Line, category: str) -> None:
        pred = self.model.predict(line.message) if self.model else None
        self.model_calls += 1
        if pred is not None and pred.category not in (category, "unknown"):
            self.disagreements += 1

            DISAGREEMENTS.inc()

    def _stage_for(
        self,
        st: StreamState,
        category: str,
        fixed: str | None,
        default: str | None,
        hint: str | None,
        line: L.Line | None = None,
    ) -> tuple[str, str]:
        """(stage, how it was decided): the rule's rung, else the latest of the stage the
        stream reached, the traceback's hint and what the failing line itself shows (a
        request, its logger's file), else a per-category default."""
        said = self.rules.stage_evidence(line.message, line.fileinfo) if line else None
        if said == "container":  # the container runtime refused: that rung, whatever failed
            return said, "evidence"
        if fixed:
            return fixed, "rule"
        if said == "serving" and st.stage and st.stage != "serving" and st.status == STARTING:
            said = None  # a request line cannot come before the server is up
        best, source = None, "default"
        for stage, how in ((st.stage, "tracker"), (hint, "frames"), (said, "evidence")):
            if stage and (best is None or later_stage(best, stage) == stage != best):
                best, source = stage, how
        if best is not None:
            return best, source
        return (
            default or self.rules.stage_rules.default_stage.get(category) or "distributed_init"
        ), "default"

    def _frame_hint(self, st: StreamState, proc: str, hint: str, changes: list[Change]) -> None:
        """Deepest specific frame wins; ``serving`` loops only when nothing else hints."""
        cur = st.frame_hint.get(proc)
        if hint != "serving" or cur is None:
            st.frame_hint[proc] = hint
        pending = self._refine.get((st.key, proc))
        if pending is None:
            return
        f, inc = pending
        new = st.frame_hint[proc]
        if f.stage_source == "default":
            stage = new
        elif f.stage_source in ("tracker", "frames", "evidence"):
            stage = later_stage(f.stage, new) or new
        else:
            return
        if stage == f.stage:
            return
        f.stage, f.stage_source = stage, "frames"
        sig = self.rules.signature(f.rule) if f.rule else None
        category = sig.category_by_stage.get(stage, sig.category) if sig else f.category
        if inc is not None and inc.primary is f and inc.status == "open":
            if category != f.category:
                f.category, f.tier = category, tier_of(category)
                f.remediation = (
                    sig.remediation if sig and sig.remediation else self._first_move(category)
                )
                changes.append(Change("updated", inc))
            else:
                changes.append(Change("evidence", inc))
        else:
            f.category, f.tier = category, tier_of(category)

    def _first_move(self, category: str) -> str:
        entry = self.playbook.get("categories", {}).get(category) or {}
        return " ".join(str(entry.get("first_move", "")).split())

    # ---- incidents -----------------------------------------------------------------
    def _attach(self, st: StreamState, f: Finding, changes: list[Change]) -> Incident | None:
        severity = "warning" if f.role == "warning" else "critical"
        if severity == "warning":
            inc = next(
                (
                    i
                    for i in st.incidents
                    if i.severity == "warning"
                    and i.run == st.run
                    and i.primary.rule == f.rule
                    and i.status == "open"
                ),
                None,
            )
        else:
            inc = st.current(severity)
        if inc is None:
            if severity == "critical":
                priors = self._priors(st)
                if priors:  # the workload restarted and failed again
                    return self._restarted(st, f, priors, changes)
            return self._open(st, f, severity, changes)
        inc.note(f.line)
        inc.updated_at = f.time
        self._implied_stage(inc, f, changes)
        if inc.add(f):
            self._refresh(st, inc)
            changes.append(Change("updated", inc))
        else:
            changes.append(Change("evidence", inc))
        return inc

    def _open(
        self,
        st: StreamState,
        f: Finding,
        severity: str,
        changes: list[Change],
        *,
        previous: Incident | None = None,
        pending: bool = False,
    ) -> Incident:
        """A new incident of this run (``pending``: a restart's, not announced until it is
        judged a new failure rather than the same one again)."""
        # (two warnings judged on one stats line are two incidents: the rule is in the id)
        key = f.line if severity == "critical" else f"{f.rule}|{f.line}"
        inc = Incident(
            id=Incident.make_id(st.key, st.run, f.seq, key),
            stream=st.key,
            run=st.run,
            primary=f,
            severity=severity,
            meta=dict(st.meta),
            opened_at=f.time,
            updated_at=f.time,
        )
        inc.note(f.line)
        if st.stage:
            inc.extra["reached"] = st.stage  # where the failing run had got to
        self._refresh(st, inc)
        st.incidents.append(inc)
        if severity != "critical":
            changes.append(Change("opened", inc))
            return inc
        st.status = FAILED
        st.runs_failed += 1
        last = st.extra.get("last_failure")
        if previous is not None:
            inc.extra["after_restart_of"] = _link(previous)
        elif last and last.get("run", st.run) < st.run:
            inc.extra["after_restart_of"] = {
                k: v for k, v in last.items() if k not in ("run", "started")
            }
        if pending:
            inc.extra["pending_restart_of"] = previous.id if previous else None
            st.extra["pending"] = {
                "incident": inc.id,
                "since": f.time if f.time is not None else st.last_time,
            }
            return inc
        self._announce(st, inc, changes)
        return inc

    def _announce(self, st: StreamState, inc: Incident, changes: list[Change]) -> None:
        st.extra["last_failure"] = {**_link(inc), "run": st.run, "started": st.first_time}
        self._index(st, inc)
        changes.append(Change("opened", inc))

    # ---- restarts ----------------------------------------------------------------------
    def _priors(self, st: StreamState) -> list[Incident]:
        """Open failures of earlier runs of this workload, latest first: this stream's, then
        those of a pod this one replaced (same workload on the same node, and Kubernetes
        said the other pod ended or this one was created after it failed:
        :mod:`service.classify.restarts`)."""
        mine = [
            i
            for i in st.incidents
            if i.status == "open"
            and i.severity == "critical"
            and i.run < st.run
            and "pending_restart_of" not in i.extra
        ]
        mine.sort(key=lambda i: i.run, reverse=True)
        return mine + self._replaced_priors(st)

    def _replaced_priors(self, st: StreamState) -> list[Incident]:
        unit = restart_unit(st.key, st.meta)
        ids = self.units.get(unit) if unit else None
        if not ids:
            return []
        out: list[tuple[int, Incident]] = []
        for iid, key in reversed(list(ids.items())):  # latest failure first
            if key == st.key:
                continue
            other = self.streams.get(key)  # memory only: an evicted pod is not followed
            inc = (
                next((i for i in other.incidents if i.id == iid and i.status == "open"), None)
                if other is not None
                else None
            )
            if inc is None:
                del ids[iid]
                continue
            # replaced, not a replica beside it: only Kubernetes' word counts, never timing
            strength = restarts.evidence(other, st, inc)
            if strength:
                out.append((strength, inc))
        best = max((s for s, _ in out), default=0)  # a pod that ended beats "some pod"
        return [inc for s, inc in out if s == best]

    def _index(self, st: StreamState, inc: Incident) -> None:
        unit = restart_unit(st.key, st.meta)
        if not unit:
            return
        ids = self.units.pop(unit, None) or {}
        ids[inc.id] = st.key
        self.units[unit] = ids  # most recently failed last
        while len(self.units) > MAX_WORKLOADS:
            del self.units[next(iter(self.units))]

    def _restarted(
        self, st: StreamState, f: Finding, priors: list[Incident], changes: list[Change]
    ) -> Incident:
        """The first failure of a restarted run: the same failure again (the prior incident
        counts a restart), a different one (a new incident linked to the prior), or, while
        only a cascade or an unknown error is known, not decided yet."""
        same = next((p for p in priors if p.category == f.category), None)
        if same is not None:
            return self._fold(st, f, same, changes)
        if f.role == "cause" and f.category != "unknown":
            return self._open(st, f, "critical", changes, previous=priors[0])
        return self._open(st, f, "critical", changes, previous=priors[0], pending=True)

    def _settle(self, st: StreamState, changes: list[Change], final: bool) -> None:
        """Judge a restart's pending incident once its root cause is known (a cause with a
        category), or at the end of the attempt (``final``): the same category as an open
        failure of the workload → that incident counts one more restart; another category →
        announced as a new incident; still unknown at the end → the same failure again."""
        pend = st.extra.get("pending") or {}
        inc = next((i for i in st.incidents if i.id == pend.get("incident")), None)
        if inc is None or inc.status != "open" or "pending_restart_of" not in inc.extra:
            st.extra.pop("pending", None)
            return
        priors = [p for p in self._priors(st) if p is not inc]
        same = next((p for p in priors if p.category == inc.category), None)
        decisive = inc.primary.role == "cause" and inc.category != "unknown"
        if same is None and not decisive and not final:
            return
        st.extra.pop("pending", None)
        del inc.extra["pending_restart_of"]
        changes[:] = [c for c in changes if c.incident is not inc]  # said nothing yet
        if same is None and inc.category == "unknown" and priors:
            same = priors[0]
        if same is None:
            self._announce(st, inc, changes)
            return
        st.incidents.remove(inc)
        st.runs_failed -= 1
        for key, (f, owner) in list(self._refine.items()):
            if owner is inc:
                self._refine[key] = (f, same)
        self._fold(st, inc.primary, same, changes, inc.related, at=inc.opened_at)

    def _fold(
        self,
        st: StreamState,
        f: Finding,
        prior: Incident,
        changes: list[Change],
        others: Iterable[Finding] = (),
        at: float | None = None,
    ) -> Incident:
        """The workload failed the same way again: one more restart of ``prior`` (moved to
        this stream when a replacement pod failed), a crash loop at the configured count.
        Only the change into a crash loop (or a new root cause) is notified."""
        also: tuple[str, ...] = ()
        if "attempts" not in prior.extra:  # the first restart: the first attempt too
            home = st if prior.stream == st.key else self.streams.get(prior.stream)
            first = (home.extra.get("last_failure") or {}) if home is not None else {}
            prior.extra["attempts"] = [
                _attempt(
                    1,
                    prior.run,
                    prior.stream,
                    prior.meta,
                    first.get("started") if first.get("id") == prior.id else None,
                    prior.opened_at,
                    prior.stage,
                )
            ]
        attempts = prior.extra["attempts"]
        if prior.stream != st.key:
            also = (prior.stream,)
            old = self.streams.get(prior.stream)
            if old is not None and prior in old.incidents:
                old.incidents.remove(prior)
            prior.stream = st.key
            prior.meta = dict(st.meta)
            st.incidents.append(prior)
        prior.restarts += 1
        prior.run = st.run
        at = f.time if at is None else at
        attempts.append(
            _attempt(prior.restarts + 1, st.run, st.key, st.meta, st.first_time, at, f.stage)
        )
        del attempts[1 : -(MAX_ATTEMPTS_KEPT - 1)]  # the first attempt and the latest ones
        prior.updated_at = at
        prior.timeline = dict(st.timeline)
        kind = "evidence"
        for finding in (f, *others):
            if prior.add(finding):
                kind = "updated"
        if prior.restarts + 1 >= self.crash_loop_attempts:
            if not prior.extra.get("crash_loop"):
                kind = "updated"
            self._crash_loop(prior)
        st.status = FAILED
        st.runs_failed += 1
        st.extra["last_failure"] = {**_link(prior), "run": st.run, "started": st.first_time}
        self._index(st, prior)
        changes.append(Change(kind, prior, also))
        return prior

    def _crash_loop(self, inc: Incident) -> None:
        attempts = inc.restarts + 1
        helps, why = restart_advice(inc.category, self.playbook)
        inc.extra["crash_loop"] = True
        inc.extra["crash_loop_at"] = self.crash_loop_attempts
        inc.extra["restart_helps"] = helps
        inc.extra["note"] = (
            f"crash loop: failed the same way {attempts} times ("
            f"{inc.restarts} restart{'s' if inc.restarts != 1 else ''}); "
            + ("restarting will not help: " if not helps else "restarting has not helped: ")
            + why
        )

    def _implied_stage(self, inc: Incident, f: Finding, changes: list[Change]) -> None:
        """A cascade that shows where things were (e.g. the API server's output handler
        failed: the engine was serving) places a root cause whose stage was only a guess."""
        sig = self.rules.signature(f.rule) if f.rule else None
        p = inc.primary
        if sig is None or not sig.implies_stage or p.stage_source != "default":
            return
        p.stage, p.stage_source = sig.implies_stage, "implied"
        psig = self.rules.signature(p.rule) if p.rule else None
        category = psig.category_by_stage.get(p.stage, psig.category) if psig else p.category
        if category != p.category:
            p.category, p.tier = category, tier_of(category)
            p.remediation = (
                psig.remediation if psig and psig.remediation else self._first_move(category)
            )
            changes.append(Change("updated", inc))

    def _refresh(self, st: StreamState, inc: Incident) -> None:
        inc.facts = dict(st.facts)
        inc.timeline = dict(st.timeline)
        inc.explanation = (
            explain_compatibility(st.facts, self.rules.cuda) if inc.tier == COMPAT_TIER else None
        )
        if inc.severity == "warning":
            self._warning_advice(inc)
            inc.extra["playbook"] = playbook_for(
                inc.category, self.playbook, st.facts, rule=inc.primary.rule
            )
        else:
            inc.extra["playbook"] = playbook_for(inc.category, self.playbook, st.facts)
        changed = diff_facts(st.last_good_facts, st.facts)
        if changed:
            inc.extra["changed_since_last_good"] = changed
        else:
            inc.extra.pop("changed_since_last_good", None)

    def _warning_advice(self, inc: Incident) -> None:
        """A warning explains itself (its own entry in the playbook's ``warnings``, else its
        signature's description and remediation) and says what triggered it."""
        p = inc.primary
        own = warning_advice(p.rule, self.playbook)
        sig = self.rules.signature(p.rule) if p.rule else None
        if own and own["first_move"]:
            p.remediation = own["first_move"]
        inc.explanation = (own or {}).get("explanation") or (
            " ".join(sig.description.split()) if sig and sig.description else None
        )
        if not p.detail:
            p.detail = serving.line_detail(p.rule, L.clean(p.line))

    # ---- judgements beyond single lines ------------------------------------------------
    def _judgement(
        self,
        st: StreamState,
        rule: str,
        category: str,
        detail: str,
        line: str,
        time: float | None,
        changes: list[Change],
        role: str = "warning",
        stage: str | None = None,
    ) -> None:
        f = Finding(
            tier=tier_of(category),
            category=category,
            stage=stage or st.stage or "serving",
            confidence=0.8,
            method="heuristic",
            rule=rule,
            line=line,
            role=role,
            priority=5 if role == "warning" else 15,
            seq=st.seq,
            time=time,
            remediation=self._first_move(category),
            detail=detail,
        )
        self._attach(st, f, changes)

    def _waiting(
        self, st: StreamState, line: L.Line, time: float | None, changes: list[Change]
    ) -> None:
        """The same "waiting for ..." line again and again in one stage, with no progress
        in between, is a hang written in the text (also in an offline log)."""
        template = mask(line.message)[:200]
        w = st.extra.get("waiting")
        if not w or w.get("template") != template or w.get("stage") != st.stage:
            st.extra["waiting"] = {
                "template": template,
                "stage": st.stage,
                "count": 1,
                "first": time,
            }
            return
        w["count"] += 1
        span = (time - w["first"]) if time is not None and w.get("first") is not None else None
        if (
            w["count"] < WAIT_REPEATS
            or (span is not None and span < WAIT_MIN_SPAN_S)
            or st.current() is not None
        ):
            return
        stage = st.stage or "distributed_init"
        category = stalls.STALL_CATEGORY.get(stage, "unknown")
        quiet = f" over {span / 60:.1f} min" if span is not None else ""
        self._judgement(
            st,
            f"{stalls.STALL_PREFIX}{stage}",
            category,
            f"stuck in {stage}: the same wait repeated {w['count']} times{quiet} with no "
            f"progress: {line.message[:300]}",
            line.text,
            time,
            changes,
            role="symptom",
            stage=stage,
        )
        inc = st.current()
        if inc is not None:
            inc.extra["stall"] = True

    def _startup_checks(
        self, st: StreamState, line: L.Line, time: float | None, changes: list[Change]
    ) -> None:
        model = st.facts.get("model", "")
        if (
            "kimi-k3" in model.lower().replace("_", "-")
            and st.facts.get("enable_prefix_caching") != "True"
        ):
            self._judgement(
                st,
                "prefix-caching-off-kimi-k3",
                "config_error",
                "Kimi K3 runs without --enable-prefix-caching (off by default for it): "
                "shared prompts are recomputed",
                line.text,
                time,
                changes,
            )

    def _stats_checks(
        self, st: StreamState, text: str, time: float | None, changes: list[Change]
    ) -> None:
        # a 0% hit rate matters where prefix caching was asked for: vLLM V1 turns it on by
        # default, so with the non-default args known, only an explicit flag expects hits
        args = st.facts.get("non_default_args")
        expected = (
            "'enable_prefix_caching': True" in args
            if args is not None
            else st.facts.get("enable_prefix_caching") == "True"
        )
        state = st.extra.setdefault("stats", {})
        for j in serving.judge(text, state, expected):
            self._judgement(st, j.rule, j.category, j.detail, L.clean(text), time, changes)

    def tick(self, now: float) -> list[Change]:
        """Timer check: open a stall incident for every startup stuck past its deadline."""
        changes: list[Change] = []
        for st in self.streams.values():
            pend = st.extra.get("pending")
            if pend and (pend.get("since") is None or now - pend["since"] >= PENDING_MAX_S):
                self._settle(st, changes, final=True)
            self.check_stall(st, now, changes)
        return changes

    def has_open_traceback(self, key: str) -> bool:
        """Whether a traceback of stream ``key`` has not reached its exception line yet."""
        return any(k[0] == key for k in self._open_tb)

    def _tb_line(self, where: tuple[str, str], line: L.Line) -> None:
        tb = self._open_tb.get(where)
        if tb is not None and len(tb) < 80:
            tb.append(line.message.strip())

    def close_truncated(self, st: StreamState, changes: list[Change]) -> None:
        """The log ended inside a traceback with no exception line (a cut paste): infer what
        its frames support, with a low confidence, rather than nothing. A restart whose
        failure was still undecided is judged now (the log ends with its attempt)."""
        for where, tb in list(self._open_tb.items()):
            if where[0] != st.key or not tb:
                continue
            del self._open_tb[where]
            if st.current() is not None or st.shutting_down:
                continue
            proc = where[1]
            text = "\n".join(tb)
            category, confidence, method = "unknown", 0.2, "heuristic"
            if self.model is not None:
                self.model_calls += 1
                pred = self.model.predict(text)
                if pred.category not in ("healthy", "unknown"):
                    category, method = pred.category, "model"
                    confidence = round(float(pred.probability) * 0.5, 3)
            hint = st.frame_hint.get(proc)
            stage, source = self._stage_for(st, category, None, None, hint)
            last = next((t for t in reversed(tb) if t.startswith("File ")), tb[-1])
            f = Finding(
                tier=tier_of(category),
                category=category,
                stage=stage,
                confidence=confidence,
                method=method,
                rule="truncated-traceback",
                line=last,
                role="symptom",
                priority=UNKNOWN_PRIORITY,
                seq=st.seq,
                time=st.last_time,
                process=None,
                remediation=self._first_move(category),
                stage_source=source,
                detail="the traceback ends before its exception line; "
                f"inferred from {len(tb)} frame/source lines",
            )
            self._attach(st, f, changes)
        if st.extra.get("pending"):
            self._settle(st, changes, final=True)

    def check_stall(self, st: StreamState, now: float, changes: list[Change]) -> None:
        """Open a stall incident when ``st`` is stuck in a startup stage past its deadline
        at ``now`` (the service's clock, or the end of an offline log / ``--now``)."""
        if st.status != STARTING or st.shutting_down or st.current() is not None:
            return
        since = st.last_stage_change if st.last_stage_change is not None else st.first_time
        waited = stalls.overdue(st.stage, since, now, self.stall_deadlines)
        if waited is None:
            return
        category = stalls.STALL_CATEGORY.get(st.stage or "", "unknown")
        self._judgement(
            st,
            f"{stalls.STALL_PREFIX}{st.stage}",
            category,
            f"stalled in {st.stage} for {waited / 60:.0f} min; last line: {st.last_line[:300]}",
            st.last_line,
            now,
            changes,
            role="symptom",
            stage=st.stage,
        )
        inc = st.current()
        if inc is not None:
            inc.extra["stall"] = True

    def _note(self, st: StreamState, line: L.Line, changes: list[Change]) -> None:
        """Lines after the first error are the incident's evidence."""
        inc = st.current()
        if inc is not None and len(inc.evidence) < 60:
            inc.note(line.text)
            # facts may arrive after the failure (e.g. nvidia-smi printed by a wrapper)
            if inc.tier == COMPAT_TIER and st.facts != inc.facts:
                self._refresh(st, inc)


def _link(inc: Incident) -> dict[str, Any]:
    """How a later incident names the one before it."""
    return {"id": inc.id, "category": inc.category, "stage": inc.stage, "restarts": inc.restarts}


def _attempt(
    n: int,
    run: int,
    stream: str,
    meta: dict[str, Any],
    started: float | None,
    failed: float | None,
    stage: str,
) -> dict[str, Any]:
    """One failed start in an incident's ``extra.attempts`` timeline."""
    out: dict[str, Any] = {
        "attempt": n,
        "run": run,
        "stream": stream,
        "started": started,
        "failed": failed,
        "stage": stage,
    }
    for key in ("pod", "container_id", "node"):
        if meta.get(key):
            out[key] = meta[key]
    return {k: v for k, v in out.items() if v is not None}


def _merge_meta(st: StreamState, meta: dict[str, Any], rules: RuleBook) -> None:
    for k, v in meta.items():
        if v and k not in ("fd", "tag") and st.meta.get(k) != v:
            st.meta[k] = v
    for key in ("image", "node", "namespace", "pod", "container"):
        if meta.get(key):
            st.facts.setdefault(key, str(meta[key]))
    image = meta.get("image")
    if image and "image_cuda" not in st.facts:
        cuda = rules.cuda.image_cuda(str(image))
        if cuda:
            st.facts["image_cuda"] = cuda
