"""The incidents of a stream's runs: a finding is attached to the run's open incident (a
stronger root cause takes over, the rest are its cascades and evidence) or opens one, the
first failure of a restarted run goes to :class:`Restarts`, and every incident carries what
an engineer asks first: the stream's facts and timeline, the compatibility explanation,
the playbook entry, a warning's own advice, the facts changed since the last good start.

Warnings (role ``warning``) are incidents of their own that never page, one per rule and
run; everything else is the run's one ``critical`` incident.
"""

from __future__ import annotations

from service.classify.facts import explain_compatibility
from service.classify.judgements import serving
from service.classify.judgements.playbook import (
    first_move,
    playbook_for,
    warning_advice,
)
from service.classify.restarts import Restarts, link, link_of
from service.classify.rulebook import RuleBook
from service.classify.rules import PlaybookRules
from service.classify.run_state import Pending
from service.classify.stream_state import FAILED, StreamState
from service.incidents.finding import Finding
from service.incidents.incident import Change, Incident, PendingRestart
from service.incidents.workload import diff_facts
from service.parse import line as L
from service.taxonomy import tier_of

COMPAT_TIER = "compatibility"
MAX_NOTED = 60  # lines of evidence noted after the first error


class IncidentBook:
    """Opens, grows and explains incidents on the streams' states."""

    def __init__(self, rules: RuleBook, playbook: PlaybookRules, restarts: Restarts) -> None:
        self.rules = rules
        self.playbook = playbook
        self.restarts = restarts

    def attach(self, st: StreamState, f: Finding, changes: list[Change]) -> Incident | None:
        """Attach ``f`` to the run's open incident of its severity, or open one."""
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
                priors = self.restarts.priors(st)
                if priors:  # the workload restarted and failed again
                    return self._restarted(st, f, priors, changes)
            return self.open(st, f, severity, changes)
        inc.note(f.line)
        inc.updated_at = f.time
        self._implied_stage(inc, f, changes)
        if inc.add(f):
            self.refresh(st, inc)
            changes.append(Change("updated", inc))
        else:
            changes.append(Change("evidence", inc))
        return inc

    def _restarted(
        self, st: StreamState, f: Finding, priors: list[Incident], changes: list[Change]
    ) -> Incident:
        """The first failure of a restarted run: the same failure again (the prior incident
        counts a restart), a different one (a new incident linked to the prior), or, while
        only a cascade or an unknown error is known, not decided yet."""
        same = next((p for p in priors if p.category == f.category), None)
        if same is not None:
            return self.restarts.fold(st, f, same, changes)
        if f.role == "cause" and f.category != "unknown":
            return self.open(st, f, "critical", changes, previous=priors[0])
        return self.open(st, f, "critical", changes, previous=priors[0], pending=True)

    def open(
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
        self.refresh(st, inc)
        st.incidents.append(inc)
        if severity != "critical":
            changes.append(Change("opened", inc))
            return inc
        st.status = FAILED
        st.runs_failed += 1
        last = st.last_failure
        if previous is not None:
            inc.extra["after_restart_of"] = link(previous)
        elif last and last.get("run", st.run) < st.run:
            inc.extra["after_restart_of"] = link_of(last)
        if pending:
            inc.pending_restart = PendingRestart(previous.id if previous else None)
            st.pending = Pending(inc.id, f.time if f.time is not None else st.last_time)
            return inc
        self.restarts.announce(st, inc, changes)
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
            p.remediation = (
                psig.remediation
                if psig and psig.remediation
                else first_move(category, self.playbook)
            )
            changes.append(Change("updated", inc))

    def refresh(self, st: StreamState, inc: Incident) -> None:
        """The stream's facts and timeline, and what follows from them, on ``inc``."""
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
        inc.explanation = (own["explanation"] if own else None) or (
            " ".join(sig.description.split()) if sig and sig.description else None
        )
        if not p.detail:
            p.detail = serving.line_detail(p.rule, L.clean(p.line))

    def note(self, st: StreamState, line: L.Line) -> None:
        """Lines after the first error are the incident's evidence."""
        inc = st.current()
        if inc is not None and len(inc.evidence) < MAX_NOTED:
            inc.note(line.text)
            # facts may arrive after the failure (e.g. nvidia-smi printed by a wrapper)
            if inc.tier == COMPAT_TIER and st.facts != inc.facts:
                self.refresh(st, inc)
