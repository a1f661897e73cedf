"""Rules a team adds without a fork: extra signature directories, rules disabled or
overridden by id, its own judgements, and every rule's own examples run as a test.

An extra directory holds ``*.yaml`` files (directly or under ``signatures/``) in the schema of
``rules/signatures/*.yaml``: a ``signatures:`` list, each rule with ``examples.match`` and
``examples.no_match``. A rule whose id is a shipped rule's replaces it; ``disabled`` ids are
left out; ``overrides`` replace fields of a rule by id (validated as the rule itself). A
``judgements.yaml`` at the top of the directory overrides keys of the shipped
``rules/judgements.yaml`` (:func:`service.classify.judgements.registry.load_judgements`); a
``redaction.yaml`` there adds secret patterns to ``rules/redaction.yaml`` (same name:
replaces), its examples run at load (:mod:`service.classify.redaction`). The same checks
serve ``vllm-sentinel rules test DIR``, ``check-config`` and start-up.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import regex
import yaml
from pydantic import ValidationError

from service.classify.judgements.registry import JudgementRules, load_judgements
from service.classify.multimatch import unsupported
from service.classify.redaction import (
    REDACTION_FILE,
    RedactionLoadError,
    Redactor,
    load_redactor,
)
from service.classify.rulebook import RuleBook
from service.classify.rules import RULES_DIR, Signature
from service.parse.line import parse_line

SHIPPED, ADDED, REPLACED, OVERRIDDEN = "shipped", "added", "replaced", "overridden"
JUDGEMENTS = "judgements.yaml"  # a team's overrides of rules/judgements.yaml, not signatures


class RuleLoadError(ValueError):
    """Rules that cannot be used; ``problems`` holds one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass
class RuleSet:
    """The signatures in effect, and where each came from; the judgements in effect (None:
    the shipped ones) and the team files they came from."""

    signatures: list[Signature]
    source: dict[str, str] = field(default_factory=dict)  # id → file it was read from
    status: dict[str, str] = field(default_factory=dict)  # id → shipped / added / ...
    disabled: list[str] = field(default_factory=list)
    judgements: JudgementRules | None = None
    judgement_files: list[str] = field(default_factory=list)
    redactor: Redactor | None = None  # None: the shipped redaction patterns
    redaction_files: list[str] = field(default_factory=list)

    def rulebook(self) -> RuleBook:
        """The rule book of these rules."""
        return RuleBook(
            signatures=self.signatures, judgements=self.judgements, redactor=self.redactor
        )


def _files(directory: Path) -> list[Path]:
    found: list[Path] = []
    for base in (directory, directory / "signatures"):
        for pattern in ("*.yaml", "*.yml"):
            found.extend(
                p
                for p in sorted(base.glob(pattern))
                if p not in (directory / JUDGEMENTS, directory / REDACTION_FILE)
            )
    return found


def said(where: str, exc: ValidationError) -> list[str]:
    """One line per problem pydantic found: ``where: key.path: what is wrong``."""
    out = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        out.append(
            f"{where}: {loc + ': ' if loc else ''}{err['msg'].removeprefix('Value error, ')}"
        )
    return out


def _judgements(rules_dir: Path, teams: list[Path], problems: list[str]) -> JudgementRules | None:
    """The shipped judgements with the teams' files merged on (None: no team file)."""
    if not teams:
        return None
    try:
        return load_judgements(rules_dir, teams)
    except ValidationError as exc:
        problems += said(", ".join(str(t) for t in teams), exc)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        problems.append(f"{JUDGEMENTS}: cannot read: {exc}")
    return None


def _read(path: Path, problems: list[str], shipped: bool = False) -> list[Signature]:
    try:
        with path.open(encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
    except (OSError, yaml.YAMLError) as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problems.append(f"{path}:{where}: cannot read: {getattr(exc, 'problem', None) or exc}")
        return []
    raw = data.get("signatures") if isinstance(data, dict) else None
    if not isinstance(raw, list):
        problems.append(f"{path}: expected a 'signatures:' list")
        return []
    out = []
    for i, item in enumerate(raw):
        rid = item.get("id") if isinstance(item, dict) else None
        try:
            sig = Signature.model_validate(item)
        except ValidationError as exc:
            problems += said(f"{path}: {rid or f'signatures[{i}]'}", exc)
            continue
        try:
            regex.compile(sig.pattern)
        except regex.error as exc:
            problems.append(f"{path}: {sig.id}: pattern is not a valid regular expression: {exc}")
            continue
        why = None if shipped else unsupported(sig.pattern, sig.case_sensitive)
        if why is not None:  # (the shipped rules are in the cached database: checked there)
            problems.append(f"{path}: {sig.id}: the rule engine cannot take it: {why}")
            continue
        out.append(sig)
    return out


def load_rule_set(
    dirs: Iterable[str | Path] = (),
    disabled: Iterable[str] = (),
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    rules_dir: Path = RULES_DIR,
) -> RuleSet:
    """Shipped signatures plus ``dirs``, minus ``disabled``, with ``overrides``; raises
    :class:`RuleLoadError` listing every problem."""
    problems: list[str] = []
    by_id: dict[str, Signature] = {}
    rs = RuleSet(signatures=[])
    for path in sorted((rules_dir / "signatures").glob("*.yaml")):
        for sig in _read(path, problems, shipped=True):
            by_id[sig.id] = sig
            rs.source[sig.id] = str(path.relative_to(rules_dir.parent))
            rs.status[sig.id] = SHIPPED
    added: dict[str, str] = {}
    teams: list[Path] = []
    redactions: list[Path] = []
    for d in dirs:
        directory = Path(d)
        if not directory.is_dir():
            problems.append(f"{d}: not a directory")
            continue
        files = _files(directory)
        if (directory / REDACTION_FILE).is_file():
            redactions.append(directory / REDACTION_FILE)
        if (directory / JUDGEMENTS).is_file():
            teams.append(directory / JUDGEMENTS)
        elif not files and not (directory / REDACTION_FILE).is_file():
            problems.append(f"{d}: no *.yaml rule files (directly or under signatures/)")
        for path in files:
            for sig in _read(path, problems):
                if sig.id in added:
                    problems.append(f"{path}: {sig.id}: also defined in {added[sig.id]}")
                    continue
                added[sig.id] = str(path)
                rs.status[sig.id] = REPLACED if sig.id in by_id else ADDED
                by_id[sig.id] = sig
                rs.source[sig.id] = str(path)
    for rid, fields in (overrides or {}).items():
        base = by_id.get(rid)
        if base is None:
            problems.append(f"overrides: no rule with id {rid!r}")
            continue
        if not isinstance(fields, Mapping) or "id" in fields:
            problems.append(f"overrides.{rid}: expected a mapping of fields (the id stays)")
            continue
        try:
            by_id[rid] = Signature.model_validate({**base.model_dump(), **fields})
        except ValidationError as exc:
            problems += said(f"overrides.{rid}", exc)
            continue
        rs.status[rid] = OVERRIDDEN
    for rid in disabled:
        if rid not in by_id:
            problems.append(f"disabled: no rule with id {rid!r}")
            continue
        del by_id[rid]
        rs.disabled.append(rid)
    rs.judgements = _judgements(rules_dir, teams, problems)
    rs.judgement_files = [str(t) for t in teams]
    if redactions:
        try:
            rs.redactor = load_redactor(rules_dir, redactions)
        except RedactionLoadError as exc:
            problems.extend(exc.problems)
        rs.redaction_files = [str(r) for r in redactions]
    if problems:
        raise RuleLoadError(problems)
    rs.signatures = list(by_id.values())
    return rs


def run_examples(rule_set: RuleSet, *, only_added: bool = False) -> list[str]:
    """Every rule's own examples, as the shipped rules are tested: each ``match`` example is
    matched by the rule and no ``no_match`` example is. One line per failure."""

    rb = rule_set.rulebook()
    failures = []
    for sig in rule_set.signatures:
        if only_added and rule_set.status.get(sig.id) == SHIPPED:
            continue
        where = f"{rule_set.source.get(sig.id, '?')}: {sig.id}"
        for example in sig.examples.match:
            if sig.id not in _matching(rb, parse_line, example):
                failures.append(f"{where}: does not match its example: {example[:160]}")
        for example in sig.examples.no_match:
            if sig.id in _matching(rb, parse_line, example):
                failures.append(f"{where}: matches its no_match example: {example[:160]}")
    return failures


def _matching(rb: Any, parse_line: Any, text: str) -> list[str]:
    line = parse_line(text)
    return [
        s.id
        for s, _ in rb.scan(line.message).signatures
        if s.levels is None or line.level is None or line.level in s.levels
    ]


def count_examples(rule_set: RuleSet) -> int:
    return sum(len(s.examples.match) + len(s.examples.no_match) for s in rule_set.signatures)
