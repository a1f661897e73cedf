"""Every per-line pattern (stages, status markers, facts, signatures) behind ONE literal
prefilter, so a benign serving line costs a single automaton scan; and the rest of the rule
data the classifier reads (benign exceptions, the judgements of ``judgements.yaml``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import regex

from service.classify.facts import CudaTable, cuda_from_api_version, norm_cuda
from service.classify.frames import FrameMap
from service.classify.hits import NO_HITS, Hits
from service.classify.judgements.registry import JudgementRules, load_judgements
from service.classify.model_context import program_name
from service.classify.multimatch import MultiMatcher
from service.classify.redaction import Redactor, load_redactor
from service.classify.rules import (
    RULES_DIR,
    Signature,
    load_benign,
    load_benign_exceptions,
    load_fact_rules,
    load_frame_rules,
    load_signatures,
    load_stage_rules,
)
from service.classify.signatures import PatternIndex, derive_literals

# Tags of a pattern in the shared index.
STAGE, READY, SERVING, RUN_START, SHUTDOWN, FACT, SIG, BENIGN = range(8)


# Words that make a line worth a full look even when no signature literal is in it.
GATE_WORDS = (
    "error",
    "exception",
    "traceback",
    "warn",
    "fatal",
    "fail",
    "killed",
    "abort",
    "panic",
    "segmentation",
    "core dumped",
    "timed out",
    "timeout",
    "refused",
    "unexpected",
    "preempt",
)


class RuleBook:
    """The loaded rule data of ``rules/``, compiled for the per-line hot path."""

    def __init__(
        self,
        rules_dir: Path = RULES_DIR,
        with_signatures: bool = True,
        exclude: frozenset[str] = frozenset(),
        signatures: list[Signature] | None = None,
        judgements: JudgementRules | None = None,
        redactor: Redactor | None = None,
    ) -> None:
        """``signatures``: the rules in effect (extra directories, disabled and overridden
        rules: :func:`service.classify.ruletest.load_rule_set`); default: the shipped ones.
        ``judgements``: likewise (a team's ``judgements.yaml`` merged on the shipped one);
        ``redactor``: the secret patterns masked in every line (default: the shipped
        ``redaction.yaml``)."""
        self.rules_dir = rules_dir
        self.redactor = redactor or load_redactor(rules_dir)
        self.judgements = judgements or load_judgements(rules_dir)
        self.benign_exceptions = load_benign_exceptions(rules_dir)
        if not with_signatures:
            sigs = []
        else:
            sigs = list(signatures) if signatures is not None else load_signatures(rules_dir)
        self.signatures = [s for s in sigs if s.id not in exclude]
        self.stage_rules = load_stage_rules(rules_dir)
        self.fact_rules = load_fact_rules(rules_dir)
        self.cuda = CudaTable(rules_dir)
        self.frames = FrameMap(load_frame_rules(rules_dir))  # the frame map
        self.file_stage = {
            f: stage for stage, names in self.stage_rules.files.items() for f in names
        }
        self._evidence = [
            (stage, regex.compile(p.pattern))
            for stage, pats in self.stage_rules.evidence.items()
            for p in pats
        ]
        # the same patterns in the linear-time engine (the first that matches wins)
        self._evidence_engine = MultiMatcher(
            [(p.pattern, True) for pats in self.stage_rules.evidence.values() for p in pats]
        )
        self._tags: list[tuple[int, Any]] = []
        patterns: list[tuple[str, list[str] | None, bool]] = []

        def add(
            tag: int,
            value: Any,
            pattern: str,
            literals: list[str] | None = None,
            case_sensitive: bool = False,
        ) -> None:
            self._tags.append((tag, value))
            patterns.append((pattern, literals, case_sensitive))

        sr = self.stage_rules
        for stage, pats in sr.stages.items():
            for p in pats:
                add(STAGE, stage, p.pattern)
        for tag, group in (
            (READY, sr.ready),
            (SERVING, sr.serving),
            (RUN_START, sr.run_start),
            (SHUTDOWN, sr.shutdown),
        ):
            for p in group:
                add(tag, None, p.pattern)
        for name, facts in self.fact_rules.facts.items():
            for fp in facts:
                add(FACT, name, fp.pattern)
        for sig in self.signatures:
            add(SIG, sig, sig.pattern, sig.literals, sig.case_sensitive)
        for b in load_benign(rules_dir):
            add(BENIGN, None, b.pattern)
        self._index = PatternIndex(patterns, "rule")
        # Steady-state gate: while a stream is serving, a line none of whose literals can
        # matter (no signature, restart, shutdown or error word) skips parsing entirely.
        gate = set(GATE_WORDS)
        for (tag, _), (pattern, literals, _cs) in zip(self._tags, patterns, strict=True):
            if tag in (SIG, RUN_START, SHUTDOWN):
                lits = literals or derive_literals(pattern)
                if not lits:
                    gate = set()  # a pattern without literal: the gate cannot be used
                    break
                gate.update(lit.lower() for lit in lits)
        self.gate_words = sorted(gate)  # literals that matter once a stream is serving
        self._gate: Any = None
        if gate:
            import ahocorasick

            self._gate = ahocorasick.Automaton()
            for word in gate:
                self._gate.add_word(word, word)
            self._gate.make_automaton()
        self._by_id = {s.id: s for s in self.signatures}

    @property
    def literals(self) -> list[str] | None:
        """Every literal some rule needs (lowercased), or None when a rule has none."""
        return None if self._index.has_unfiltered else list(self._index.literals)

    def worth_a_look(self, text: str) -> bool:
        """Whether a raw line of a serving stream may matter (one automaton scan)."""
        if self._gate is None:
            return True
        for _ in self._gate.iter(text.lower()):
            return True
        return False

    def stage_evidence(self, message: str, fileinfo: str | None) -> str | None:
        """The stage the failing line itself points to (what it talks about, else its
        logger's file), or None."""
        head = message[:2000]
        found = self._evidence_engine.matching(head)
        if found is not None:  # ASCII: the engine's answer, prefiltered ones confirmed
            confirm = self._evidence_engine.plan.confirm
            for idx in found:
                stage, pattern = self._evidence[idx]
                try:
                    if idx not in confirm or pattern.search(head, timeout=0.05):
                        return stage
                except TimeoutError:
                    continue
            return self._file_stage(fileinfo)
        for stage, pattern in self._evidence:
            try:
                if pattern.search(head, timeout=0.05):
                    return stage
            except TimeoutError:
                continue
        return self._file_stage(fileinfo)

    def _file_stage(self, fileinfo: str | None) -> str | None:
        if fileinfo:
            name = fileinfo.rsplit(":", 1)[0].rsplit("/", 1)[-1]
            return self.file_stage.get(name)
        return None

    def signature(self, rule_id: str) -> Signature | None:
        return self._by_id.get(rule_id)

    def scan(self, message: str) -> Hits:
        found = self._index.search(message)
        if not found:
            return NO_HITS
        hits = Hits([], False, False, False, False, [], [])
        for idx, m in found:
            tag, value = self._tags[idx]
            if tag == SIG:
                hits.signatures.append((value, m))
            elif tag == STAGE:
                hits.stages.append(value)
            elif tag == FACT:
                v = m.group(1) if m.groups() else m.group(0)
                if v:
                    hits.facts.append((value, _fact_value(value, v.strip())))
            elif tag == READY:
                hits.ready = True
            elif tag == SERVING:
                hits.serving = True
            elif tag == RUN_START:
                hits.run_start = True
            elif tag == BENIGN:
                hits.benign = True
            else:
                hits.shutdown = True
        if len(hits.signatures) > 1:
            hits.signatures.sort(key=lambda h: -h[0].priority)
        return hits


def _fact_value(name: str, value: str) -> str:
    if name == "driver_cuda" and value.isdigit():
        return cuda_from_api_version(value)
    if name == "image_cuda":
        return norm_cuda(value)
    if name == "program":  # one name per program, whichever of its wordings came first
        return program_name(value) or value
    return value
