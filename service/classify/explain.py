"""What every incident carries beside its findings, kept current: the stream's facts and
timeline, the compatibility explanation, the playbook entry (a warning's own advice), the
facts changed since the workload's last good start; and a root cause whose stage was only a
guess placed by a cascade that shows where things were."""

from __future__ import annotations

from service.classify.facts import explain_compatibility
from service.classify.judgements import serving
from service.classify.judgements.playbook import first_move, playbook_for, warning_advice
from service.classify.rulebook import RuleBook
from service.classify.rules import PlaybookRules
from service.classify.stream_state import StreamState
from service.incidents.finding import Finding
from service.incidents.incident import Change, Incident
from service.incidents.workload import diff_facts
from service.parse import line as L
from service.taxonomy import reached_by, tier_of

COMPAT_TIER = "compatibility"


class Explainer:
    """Explains incidents under one rule book and playbook."""

    def __init__(self, rules: RuleBook, playbook: PlaybookRules) -> None:
        self.rules = rules
        self.playbook = playbook

    def refresh(self, st: StreamState, inc: Incident) -> None:
        """The stream's facts and timeline, and what follows from them, on ``inc``."""
        inc.facts = dict(st.facts)
        # the run's rungs, none after the failure's (a warning's: all of them)
        inc.timeline = reached_by(st.timeline, inc.stage if inc.severity == "critical" else None)
        inc.explanation = (
            explain_compatibility(st.facts, self.rules.cuda) if inc.tier == COMPAT_TIER else None
        )
        warning = inc.severity == "warning"
        if warning:
            self._warning_advice(inc)
        inc.extra["playbook"] = playbook_for(
            inc.category, self.playbook, st.facts, rule=inc.primary.rule if warning else None
        )
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

    def implied_stage(self, inc: Incident, f: Finding, changes: list[Change]) -> None:
        """A cascade that shows where things were (e.g. the API server's output handler
        failed: the engine was serving) places a root cause whose stage was only a guess."""
        sig = self.rules.signature(f.rule) if f.rule else None
        p = inc.primary
        if sig is None or not sig.implies_stage or p.stage_source != "default":
            return
        p.stage, p.stage_source = sig.implies_stage, "implied"
        inc.timeline = reached_by(inc.timeline, p.stage)
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
