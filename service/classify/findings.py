"""What one line says: its :class:`Finding` and the stage it belongs to.

* A signature decides first (its role, priority, stage hints, the category it takes at that
  stage); the text model is asked only about error-looking lines no signature explains, and
  its calibrated answer decides tier and category; when it abstains, an exception, or an error
  line it still leans to a failure class for, is an ``unknown`` symptom naming the line.
* The stage: a rule's own rung; after the ready marker, ``serving``; else what the traceback's
  frames decide (the frame map, :mod:`.frames`); else the latest of the stage the stream
  reached and what the failing line itself shows; else a per-category default.
* Later frames of the same traceback refine a finding whose stage was only a guess
  (:meth:`Findings.refine`); a log that ends inside a traceback still gets a low-confidence
  finding from its frames (:meth:`Findings.truncated`); a check's :class:`Judgement` becomes
  a finding like a line's (:meth:`Findings.judged`).

Stateless but for the model's counters: the stream's state comes in, a finding goes out.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Protocol

from service.classify.judgements.judgement import Judgement
from service.classify.judgements.playbook import first_move
from service.classify.model_context import ModelContext, context_of
from service.classify.rulebook import RuleBook
from service.classify.rules import PlaybookRules, Signature
from service.classify.stream_state import STARTING, StreamState
from service.incidents.finding import Finding
from service.incidents.incident import Change, Incident
from service.metrics import DISAGREEMENTS, FINDINGS
from service.parse import line as L
from service.parse.masking import mask
from service.taxonomy import later_stage, reached_by, tier_of

MODEL_PRIORITY = 35
UNKNOWN_PRIORITY = 10
# Lines of other programs (runtimes, kernel, transports, C++ services) that print no level:
# these words send them to the text model, which abstains on what it does not know.
_FAILURE_WORDS = re.compile(
    r"\b(?:fail(?:ed|ure|s)?|errors?|fatal|cannot|can't|unable to|refused|denied|killed|"
    r"segmentation fault|core dumped|abort(?:ed|ing)?|panic|timed out|out of memory|"
    r"no such file|not found|mismatch|invalid|exception|xid)\b",
    re.IGNORECASE,
)


class TextModelLike(Protocol):
    def predict(self, text: str, context: ModelContext | None = None) -> Any: ...


class NoveltyLike(Protocol):
    def observe(self, text: str) -> tuple[str, bool]: ...


def error_like(line: L.Line, benign_exceptions: frozenset[str]) -> str | None:
    """``exception`` for exception lines (but ``benign_exceptions``, ``rules/benign.yaml``),
    ``error`` for ERROR-level lines, else None."""
    if line.kind == L.EXCEPTION:
        return None if line.exc in benign_exceptions else "exception"
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
    if line.kind == L.PLAIN and line.level is None and _FAILURE_WORDS.search(line.message[:300]):
        return "error"  # another program's failure without a level: the model decides
    return None


def count(f: Finding) -> Finding:
    """``f``, counted in ``sentinel_findings_total``."""
    FINDINGS.labels(tier=f.tier, category=f.category, method=f.method).inc()
    return f


def counted(f: Finding | None) -> Finding | None:
    return count(f) if f is not None else None


class Findings:
    """Findings of lines (and of judgements) under one rule book, playbook and model."""

    def __init__(
        self,
        rules: RuleBook,
        playbook: PlaybookRules,
        model: TextModelLike | None = None,
        novelty: NoveltyLike | None = None,
        innermost: Callable[[tuple[str, str]], tuple[str, str] | None] | None = None,
    ) -> None:
        self.rules = rules
        self.playbook = playbook
        self.model = model
        self.novelty = novelty
        self.innermost = innermost  # (stream, process) → innermost frame the line ended
        self.model_calls = 0
        self.disagreements = 0

    def first_move(self, category: str) -> str:
        return first_move(category, self.playbook)

    def of_line(
        self, st: StreamState, line: L.Line, sigs: list[tuple[Signature, Any]], time: float | None
    ) -> Finding | None:
        """The finding of ``line`` (``sigs``: the signatures it matched, best first)."""
        return counted(self._of_line(st, line, sigs, time))

    def _of_line(
        self, st: StreamState, line: L.Line, sigs: list[tuple[Signature, Any]], time: float | None
    ) -> Finding | None:
        hint = st.frame_hint.get(line.proc_key)
        if sigs and line.level is not None:
            sigs = [h for h in sigs if h[0].levels is None or line.level in h[0].levels]
        platform = st.facts.get("platform", "").lower()
        if sigs and platform:
            sigs = [h for h in sigs if platform not in h[0].quiet_on]
        if sigs:
            sig = sigs[0][0]
            if st.shutting_down and sig.role in ("cascade", "symptom", "warning"):
                return None
            stage, source = self.stage_for(
                st, sig.category, sig.stage, sig.default_stage, hint, line
            )
            if sig.min_stage and source != "rule":
                stage = later_stage(stage, sig.min_stage) or stage
            category = sig.category_by_stage.get(stage, sig.category)
            if (
                self.model is not None
                and sig.role == "cause"
                and error_like(line, self.rules.benign_exceptions)
            ):
                self._check_disagreement(st, line, category)
            return self._made(
                st,
                line,
                time,
                category,
                (stage, source),
                sig.confidence,
                "signature",
                sig.priority,
                rule=sig.id,
                role=sig.role,
                remediation=sig.remediation,
            )
        strength = error_like(line, self.rules.benign_exceptions)
        if strength is None or st.shutting_down:
            return None
        template, novel = (
            self.novelty.observe(line.message) if self.novelty else (mask(line.message), False)
        )
        if self.model is not None:
            self.model_calls += 1
            pred = self.model.predict(line.message, self.context(st, line))
            template = getattr(pred, "template", None) or template
            cat = pred.category
            if cat not in ("healthy", "unknown"):
                placed = self.stage_for(st, cat, None, None, hint, line)
                confidence = float(pred.probability)
                return self._made(
                    st,
                    line,
                    time,
                    cat,
                    placed,
                    confidence,
                    "model",
                    MODEL_PRIORITY,
                    template,
                    novel,
                )
            if cat == "healthy":
                return None
            if strength != "exception" and not self._leans_to_failure(pred):
                return None
        elif strength != "exception":
            return None
        placed = self.stage_for(st, "unknown", None, None, hint, line)
        return self._made(
            st, line, time, "unknown", placed, 0.3, "heuristic", UNKNOWN_PRIORITY, template, novel
        )

    def _made(
        self,
        st: StreamState,
        line: L.Line,
        time: float | None,
        category: str,
        placed: tuple[str, str],
        confidence: float,
        method: str,
        priority: int,
        template: str | None = None,
        novel: bool = False,
        *,
        rule: str | None = None,
        role: str = "symptom",
        remediation: str = "",
    ) -> Finding:
        """The finding of ``line`` of ``st``: ``placed`` is its (stage, how it was
        decided); without a remediation of its own, the category's first move."""
        stage, source = placed
        return Finding(
            tier=tier_of(category),
            category=category,
            stage=stage,
            confidence=confidence,
            method=method,
            rule=rule,
            line=line.text,
            role=role,
            priority=priority,
            seq=st.seq,
            time=time,
            process=line.process,
            remediation=remediation or self.first_move(category),
            template=template,
            novel=novel,
            stage_source=source,
        )

    def _leans_to_failure(self, pred: Any) -> bool:
        """An abstention that still names the line: the model's top class is a failure
        class, reaching the model's floor but not that class's own, higher bar."""
        floor = float(getattr(self.model, "threshold", 1.0))
        best = getattr(pred, "best", "")
        return best not in ("", "healthy", "unknown") and float(pred.probability) >= floor

    def context(self, st: StreamState, line: L.Line) -> ModelContext:
        """What the stream knows around ``line``, for the text model."""
        frame = self.innermost((st.key, line.proc_key)) if self.innermost else None
        return context_of(line, stage=st.stage, program=st.facts.get("program"), frame=frame)

    def _check_disagreement(self, st: StreamState, line: L.Line, category: str) -> None:
        pred = self.model.predict(line.message, self.context(st, line)) if self.model else None
        self.model_calls += 1
        if pred is not None and pred.category not in (category, "unknown"):
            self.disagreements += 1
            DISAGREEMENTS.inc()

    def stage_for(
        self,
        st: StreamState,
        category: str,
        fixed: str | None,
        default: str | None,
        hint: str | None,
        line: L.Line | None = None,
    ) -> tuple[str, str]:
        """(stage, how it was decided), in this order: the container runtime's words; the
        rule's own rung; after the run's ready marker, ``serving`` (a request's failure) but
        for a port bind; the traceback's frames (``hint``: the innermost frame of the
        engine's own code, :mod:`.frames`); else the latest of the stage the stream reached
        and what the failing line itself shows (a request, its logger's file); else a
        per-category default."""
        said = self.rules.stage_evidence(line.message, line.fileinfo) if line else None
        if hint is None and line is not None:  # a message only mapped functions raise
            hint = self.rules.frames.raised_stage(line.message)
        if said == "container":  # the container runtime refused: that rung, whatever failed
            return said, "evidence"
        if fixed:  # the rule's rung, unless the failing line's own words name another
            return (said, "evidence") if said and said != "serving" else (fixed, "rule")
        if st.checks.ready:  # the server said it was up: a failure now is a request's
            if "api_server" in (said, hint):
                return "api_server", "evidence" if said == "api_server" else "frames"
            return "serving", "ready"
        if hint:
            return hint, "frames"
        if said == "serving" and st.stage and st.stage != "serving" and st.status == STARTING:
            said = None  # a request line cannot come before the server is up
        best, source = None, "default"
        for stage, how in ((st.stage, "tracker"), (said, "evidence")):
            if stage and (best is None or later_stage(best, stage) == stage != best):
                best, source = stage, how
        if best is not None:
            return best, source
        return (
            default or self.rules.stage_rules.default_stage.get(category) or "distributed_init"
        ), "default"

    def refine(self, f: Finding, inc: Incident | None, hint: str) -> list[Change]:
        """The frames of ``f``'s traceback, read after ``f`` (a failure logged before its
        traceback), place it at ``hint`` (a rule's rung, the container's or a port bind's
        words, and the serving stage after the ready marker stay); its incident (when
        ``f`` is still its root cause) changes with it."""
        if f.stage_source in ("rule", "ready", "implied") or (
            f.stage_source == "evidence" and f.stage in ("container", "api_server")
        ):
            return []
        stage = hint
        if stage == f.stage:
            return []
        f.stage, f.stage_source = stage, "frames"
        sig = self.rules.signature(f.rule) if f.rule else None
        if sig and sig.min_stage:
            f.stage = later_stage(stage, sig.min_stage) or stage
        category = sig.category_by_stage.get(f.stage, sig.category) if sig else f.category
        if inc is not None and inc.primary is f:
            inc.timeline = reached_by(inc.timeline, f.stage)
        if inc is None or inc.primary is not f or inc.status != "open":
            f.category, f.tier = category, tier_of(category)
            return []
        if category == f.category:
            return [Change("evidence", inc)]
        f.category, f.tier = category, tier_of(category)
        f.remediation = sig.remediation if sig and sig.remediation else self.first_move(category)
        return [Change("updated", inc)]

    def truncated(self, st: StreamState, proc: str, tb: list[str]) -> Finding:
        """A traceback the log ends inside, before its exception line (a cut paste): what
        its frames support, with a low confidence, rather than nothing."""
        text = "\n".join(tb)
        category, confidence, method = "unknown", 0.2, "heuristic"
        if self.model is not None:
            self.model_calls += 1
            pred = self.model.predict(text)
            if pred.category not in ("healthy", "unknown"):
                category, method = pred.category, "model"
                confidence = round(float(pred.probability) * 0.5, 3)
        stage, source = self.stage_for(st, category, None, None, st.frame_hint.get(proc))
        last = next((t for t in reversed(tb) if t.startswith("File ")), tb[-1])
        return count(
            Finding(
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
                remediation=self.first_move(category),
                stage_source=source,
                detail="the traceback ends before its exception line; "
                f"inferred from {len(tb)} frame/source lines",
            )
        )

    def judged(self, st: StreamState, j: Judgement, time: float | None) -> Finding:
        """The finding of a check's judgement, at the stream's current line."""
        return count(
            Finding(
                tier=tier_of(j.category),
                category=j.category,
                stage=j.stage or st.stage or "serving",
                confidence=0.8,
                method="heuristic",
                rule=j.rule,
                line=j.line,
                role=j.role,
                priority=5 if j.role == "warning" else 15,
                seq=st.seq,
                time=time,
                remediation=self.first_move(j.category),
                detail=j.detail,
            )
        )
