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

from service.classify.facts import explain_compatibility
from service.classify.finding import Finding
from service.classify.incident import Incident
from service.classify.masking import mask
from service.classify.rulebook import RuleBook
from service.classify.rules import RULES_DIR, Signature, load_playbook
from service.classify.stream_state import FAILED, READY, SERVING, STARTING, STOPPED, StreamState
from service.intel import serving_stats, stalls
from service.intel.playbook import playbook_for
from service.intel.workload import diff_facts, workload_key
from service.parse import line as L
from service.records import LogRecord
from service.taxonomy import STAGE_INDEX, later_stage, tier_of

# Exceptions that are not failures in themselves.
BENIGN_EXC = frozenset({
    "KeyboardInterrupt", "SystemExit", "GeneratorExit", "CancelledError",
    "asyncio.exceptions.CancelledError", "asyncio.CancelledError", "StopIteration",
})
MODEL_PRIORITY = 35
UNKNOWN_PRIORITY = 10
COMPAT_TIER = "compatibility"


class TextModelLike(Protocol):
    def predict(self, text: str) -> Any: ...


class NoveltyLike(Protocol):
    def observe(self, text: str) -> tuple[str, bool]: ...


@dataclass(slots=True)
class Change:
    """An incident changed: ``opened``, ``updated`` (root cause or restarts changed),
    ``resolved``, or ``evidence`` (more lines attached; stored, not notified)."""

    kind: str
    incident: Incident


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
_WAITING = re.compile(r"\b(?:waiting for|still waiting|waiting on|wait for .{0,40} to "
                      r"(?:start|connect|join|be ready))\b", re.IGNORECASE)
WAIT_REPEATS = 5
WAIT_MIN_SPAN_S = 120.0
MAX_WORKLOADS = 100_000  # last-good facts kept in memory (least recently started go first)


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
    ) -> None:
        self.rules = rulebook or RuleBook()
        self.playbook = load_playbook(self.rules.rules_dir if rulebook else RULES_DIR)
        self.model = text_model
        self.novelty = novelty
        self.state_loader = state_loader
        self.clock = clock  # service mode: ingestion time when a record carries none
        self.stall_deadlines = stall_deadlines or stalls.DEFAULT_DEADLINES_S
        self.last_good: dict[str, dict[str, str]] = {}  # workload → facts of its last good start
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
        st = self.state(rec.stream, rec.meta)
        meta = rec.meta
        if meta and (meta.get("container_id") != st.meta.get("container_id")
                     or meta.get("image") != st.meta.get("image") or not st.facts):
            _merge_meta(st, meta, self.rules)
        return self.feed_text(st, rec.text, rec.time)

    def feed_text(self, st: StreamState, text: str, time: float | None = None) -> list[Change]:
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
        if hits.run_start and self._is_new_run(st):
            self._new_run(st, changes)
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
            if line.message.startswith(("Application shutdown complete", "Finished server process")):
                st.status = STOPPED if st.status != FAILED else FAILED
        for name, value in hits.facts:
            st.facts.setdefault(name, value)
        if hits.serving and "throughput" in line.message and not st.shutting_down:
            self._stats_checks(st, line.text, time, changes)

        if (st.status == STARTING and not st.shutting_down and not hits.stages
                and _WAITING.search(line.message[:300])):
            self._waiting(st, line, time, changes)
        finding = (None if hits.benign and not hits.signatures
                   else self._finding(st, line, hits.signatures, time))
        if finding is not None:
            inc = self._attach(st, finding, changes)
            self._refine[(st.key, line.proc_key)] = (finding, inc)
        else:
            self._note(st, line, changes)
        return changes

    # ---- stages and runs -----------------------------------------------------------
    @staticmethod
    def _is_new_run(st: StreamState) -> bool:
        if st.stage is None:
            return False
        return st.status != STARTING or STAGE_INDEX[st.stage] >= STAGE_INDEX["distributed_init"]

    def _new_run(self, st: StreamState, changes: list[Change]) -> None:
        st.run += 1
        st.stage = None
        st.timeline = {}
        st.status = STARTING
        st.shutting_down = False
        st.frame_hint = {}
        st.facts = {}
        st.first_time = st.last_time
        _merge_meta(st, st.meta, self.rules)

    def _advance(self, st: StreamState, stage: str, time: float | None,
                 changes: list[Change]) -> None:
        if st.stage is not None and STAGE_INDEX[stage] <= STAGE_INDEX[st.stage]:
            return
        # Skipped stages are implied (a log never says every marker).
        start = STAGE_INDEX[st.stage] + 1 if st.stage else STAGE_INDEX[stage]
        for s in list(STAGE_INDEX)[start:STAGE_INDEX[stage] + 1]:
            st.timeline.setdefault(s, time if time is not None else st.seq)
        st.stage = stage
        st.last_stage_change = time
        for inc in list(st.incidents):
            if (inc.run == st.run and inc.status == "open" and stalls.is_stall(inc.primary.rule)
                    and STAGE_INDEX[stage] > STAGE_INDEX[inc.stage]):
                inc.status, inc.resolved_at = "resolved", time
                inc.resolution = f"the stream moved on to {stage}"
                st.incidents.remove(inc)
                if st.status == FAILED:
                    st.status = STARTING
                changes.append(Change("resolved", inc))
        self._resolve_passed(st, time, changes)

    def _resolve_passed(self, st: StreamState, time: float | None, changes: list[Change],
                        ready: bool = False) -> None:
        """A later run that gets past the failing stage resolves the incident."""
        for inc in list(st.incidents):
            if inc.status != "open" or inc.run >= st.run or inc.severity != "critical":
                continue
            failed_at = later_stage(inc.stage, inc.extra.get("reached")) or inc.stage
            if ready or (st.stage and STAGE_INDEX[st.stage] > STAGE_INDEX[failed_at]):
                inc.status = "resolved"
                inc.resolved_at = time
                inc.resolution = (
                    f"run {st.run} of the workload got past {inc.stage}"
                    + (" and is ready" if ready else f" (reached {st.stage})")
                )
                st.incidents.remove(inc)
                changes.append(Change("resolved", inc))

    # ---- findings ------------------------------------------------------------------
    def _finding(self, st: StreamState, line: L.Line, sigs: list[tuple[Signature, Any]],
                 time: float | None) -> Finding | None:
        hint = st.frame_hint.get(line.proc_key)
        if sigs and line.level is not None:
            sigs = [h for h in sigs if h[0].levels is None or line.level in h[0].levels]
        if sigs:
            sig = sigs[0][0]
            if st.shutting_down and sig.role in ("cascade", "symptom", "warning"):
                return None
            stage, source = self._stage_for(st, sig.category, sig.stage, sig.default_stage, hint,
                                            line)
            if sig.min_stage and source != "rule":
                stage = later_stage(stage, sig.min_stage) or stage
            category = sig.category_by_stage.get(stage, sig.category)
            if self.model is not None and sig.role == "cause" and self._error_like(line):
                self._check_disagreement(line, category)
            return Finding(
                tier=tier_of(category), category=category, stage=stage,
                confidence=sig.confidence, method="signature", rule=sig.id, line=line.text,
                role=sig.role, priority=sig.priority, seq=st.seq, time=time,
                process=line.process, remediation=sig.remediation or self._first_move(category),
                stage_source=source,
            )
        strength = self._error_like(line)
        if strength is None or st.shutting_down:
            return None
        template, novel = (self.novelty.observe(line.message) if self.novelty
                           else (mask(line.message), False))
        if self.model is not None:
            self.model_calls += 1
            pred = self.model.predict(line.message)
            template = getattr(pred, "template", None) or template
            cat = pred.category
            if cat not in ("healthy", "unknown"):
                stage, source = self._stage_for(st, cat, None, None, hint, line)
                return Finding(
                    tier=tier_of(cat), category=cat, stage=stage,
                    confidence=float(pred.probability), method="model", rule=None,
                    line=line.text, role="symptom", priority=MODEL_PRIORITY, seq=st.seq,
                    time=time, process=line.process, remediation=self._first_move(cat),
                    template=template, novel=novel, stage_source=source,
                )
            if cat == "healthy":
                return None
        if strength != "exception":
            return None
        stage, source = self._stage_for(st, "unknown", None, None, hint, line)
        return Finding(
            tier="other", category="unknown", stage=stage,
            confidence=0.3, method="heuristic", rule=None, line=line.text, role="symptom",
            priority=UNKNOWN_PRIORITY, seq=st.seq, time=time, process=line.process,
            remediation=self._first_move("unknown"), template=template, novel=novel,
            stage_source=source,
        )

    @staticmethod
    def _error_like(line: L.Line) -> str | None:
        """``exception`` for exception lines, ``error`` for ERROR-level lines, else None."""
        if line.kind == L.EXCEPTION:
            return None if line.exc in BENIGN_EXC else "exception"
        if line.level in ("ERROR", "CRITICAL") and line.kind in (L.VLLM, L.PLAIN, L.TORCH,
                                                                 L.NCCL, L.UVICORN):
            return "error"
        if line.kind == L.NCCL and line.level == "WARNING":
            return "error"
        if line.kind == L.PLAIN and line.level is None and _FAILURE_WORDS.search(
                line.message[:300]):
            return "error"  # another program's failure without a level: the model decides
        return None

    def _check_disagreement(self, line: L.Line, category: str) -> None:
        pred = self.model.predict(line.message) if self.model else None
        self.model_calls += 1
        if pred is not None and pred.category not in (category, "unknown"):
            self.disagreements += 1
            from service.metrics import DISAGREEMENTS

            DISAGREEMENTS.inc()

    def _stage_for(self, st: StreamState, category: str, fixed: str | None,
                   default: str | None, hint: str | None,
                   line: L.Line | None = None) -> tuple[str, str]:
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
        return (default or self.rules.stage_rules.default_stage.get(category)
                or "distributed_init"), "default"

    def _frame_hint(self, st: StreamState, proc: str, hint: str,
                    changes: list[Change]) -> None:
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
                f.remediation = (sig.remediation if sig and sig.remediation
                                 else self._first_move(category))
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
            inc = next((i for i in st.incidents if i.severity == "warning" and i.run == st.run
                        and i.primary.rule == f.rule and i.status == "open"), None)
        else:
            inc = st.current(severity)
        if inc is None:
            same = None
            if severity == "critical":
                same = next((i for i in st.incidents if i.status == "open"
                             and i.severity == "critical" and i.category == f.category
                             and i.run < st.run), None)
            if same is not None:  # the workload restarted and failed the same way
                same.restarts += 1
                same.run = st.run
                if same.restarts >= 2:
                    same.extra["crash_loop"] = True
                    same.extra["restart_helps"] = same.tier not in ("compatibility", "integration")
                    if not same.extra["restart_helps"]:
                        same.extra["note"] = (f"crash loop: failed the same way {same.restarts + 1}"
                                              f" times; restarting will not help")
                same.updated_at = f.time
                same.timeline = dict(st.timeline)
                changes.append(Change("updated", same))
                if f.role != "cascade":
                    st.status = FAILED
                return same
            inc = Incident(
                id=Incident.make_id(st.key, st.run, f.seq, f.line), stream=st.key, run=st.run,
                primary=f, severity=severity, meta=dict(st.meta), opened_at=f.time,
                updated_at=f.time,
            )
            inc.note(f.line)
            if st.stage:
                inc.extra["reached"] = st.stage  # where the failing run had got to
            self._refresh(st, inc)
            st.incidents.append(inc)
            if severity == "critical":
                st.status = FAILED
                st.runs_failed += 1
            changes.append(Change("opened", inc))
            return inc
        inc.note(f.line)
        inc.updated_at = f.time
        self._implied_stage(inc, f, changes)
        if inc.add(f):
            self._refresh(st, inc)
            changes.append(Change("updated", inc))
        else:
            changes.append(Change("evidence", inc))
        return inc

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
            p.remediation = (psig.remediation if psig and psig.remediation
                             else self._first_move(category))
            changes.append(Change("updated", inc))

    def _refresh(self, st: StreamState, inc: Incident) -> None:
        inc.facts = dict(st.facts)
        inc.timeline = dict(st.timeline)
        inc.explanation = (explain_compatibility(st.facts, self.rules.cuda)
                           if inc.tier == COMPAT_TIER else None)
        inc.extra["playbook"] = playbook_for(inc.category, self.playbook, st.facts)
        changed = diff_facts(st.last_good_facts, st.facts)
        if changed:
            inc.extra["changed_since_last_good"] = changed
        else:
            inc.extra.pop("changed_since_last_good", None)

    # ---- judgements beyond single lines ------------------------------------------------
    def _judgement(self, st: StreamState, rule: str, category: str, detail: str, line: str,
                   time: float | None, changes: list[Change], role: str = "warning",
                   stage: str | None = None) -> None:
        f = Finding(
            tier=tier_of(category), category=category, stage=stage or st.stage or "serving",
            confidence=0.8, method="heuristic", rule=rule, line=line, role=role,
            priority=5 if role == "warning" else 15, seq=st.seq, time=time,
            remediation=self._first_move(category), detail=detail,
        )
        self._attach(st, f, changes)

    def _waiting(self, st: StreamState, line: L.Line, time: float | None,
                 changes: list[Change]) -> None:
        """The same "waiting for ..." line again and again in one stage, with no progress
        in between, is a hang written in the text (also in an offline log)."""
        template = mask(line.message)[:200]
        w = st.extra.get("waiting")
        if not w or w.get("template") != template or w.get("stage") != st.stage:
            st.extra["waiting"] = {"template": template, "stage": st.stage, "count": 1,
                                   "first": time}
            return
        w["count"] += 1
        span = (time - w["first"]) if time is not None and w.get("first") is not None else None
        if w["count"] < WAIT_REPEATS or (span is not None and span < WAIT_MIN_SPAN_S) \
                or st.current() is not None:
            return
        stage = st.stage or "distributed_init"
        category = stalls.STALL_CATEGORY.get(stage, "unknown")
        quiet = f" over {span / 60:.1f} min" if span is not None else ""
        self._judgement(
            st, f"{stalls.STALL_PREFIX}{stage}", category,
            f"stuck in {stage}: the same wait repeated {w['count']} times{quiet} with no "
            f"progress: {line.message[:300]}", line.text, time, changes, role="symptom",
            stage=stage)
        inc = st.current()
        if inc is not None:
            inc.extra["stall"] = True

    def _startup_checks(self, st: StreamState, line: L.Line, time: float | None,
                        changes: list[Change]) -> None:
        model = st.facts.get("model", "")
        if "kimi-k3" in model.lower().replace("_", "-") and st.facts.get("enable_prefix_caching") != "True":
            self._judgement(st, "prefix-caching-off-kimi-k3", "config_error",
                            "Kimi K3 runs without --enable-prefix-caching (off by default for it): "
                            "shared prompts are recomputed", line.text, time, changes)

    def _stats_checks(self, st: StreamState, text: str, time: float | None,
                      changes: list[Change]) -> None:
        expected = (st.facts.get("enable_prefix_caching") == "True"
                    or "'enable_prefix_caching': True" in st.facts.get("non_default_args", ""))
        state = st.extra.setdefault("stats", {})
        for j in serving_stats.judge(text, state, expected):
            self._judgement(st, j.rule, j.category, j.detail, L.clean(text), time, changes)

    def tick(self, now: float) -> list[Change]:
        """Timer check: open a stall incident for every startup stuck past its deadline."""
        changes: list[Change] = []
        for st in self.streams.values():
            self.check_stall(st, now, changes)
        return changes

    def _tb_line(self, where: tuple[str, str], line: L.Line) -> None:
        tb = self._open_tb.get(where)
        if tb is not None and len(tb) < 80:
            tb.append(line.message.strip())

    def close_truncated(self, st: StreamState, changes: list[Change]) -> None:
        """The log ended inside a traceback with no exception line (a cut paste): infer what
        its frames support, with a low confidence, rather than nothing."""
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
                tier=tier_of(category), category=category, stage=stage, confidence=confidence,
                method=method, rule="truncated-traceback", line=last, role="symptom",
                priority=UNKNOWN_PRIORITY, seq=st.seq, time=st.last_time, process=None,
                remediation=self._first_move(category), stage_source=source,
                detail="the traceback ends before its exception line; "
                       f"inferred from {len(tb)} frame/source lines")
            self._attach(st, f, changes)

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
            st, f"{stalls.STALL_PREFIX}{st.stage}", category,
            f"stalled in {st.stage} for {waited / 60:.0f} min; last line: {st.last_line[:300]}",
            st.last_line, now, changes, role="symptom", stage=st.stage)
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
