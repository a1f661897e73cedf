"""Redaction at the door: secret-shaped values masked in a log line before anything reads it.

The patterns are data (``rules/redaction.yaml``, extended by a team's ``redaction.yaml``),
each with examples that are run as tests at load. :meth:`Redactor.redact` is called on every
line the classifier is fed (:meth:`service.classify.engine.Classifier.feed`), so the secret
never reaches classification, evidence, facts, the store, a page or a reply. One automaton
scan per line picks the patterns whose literals the line holds; a line with none costs that
scan alone. Every replacement is counted in ``sentinel_redactions_total{pattern}``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import ahocorasick
import regex
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from service import metrics
from service.classify.rules import Examples

REDACTION_FILE = "redaction.yaml"
LINE_CAP = 8192  # characters of a line kept past the door (the parser's and the store's cap)
MAX_OPEN_BLOCKS = 4096  # streams with a multi-line secret open at once (the oldest goes)
SECRET_GROUP = "secret"
Blocks = OrderedDict[str, int]  # stream → index of the pattern whose multi-line secret is open


class SecretExample(BaseModel):
    """A line with a secret, and the secret: redaction must remove it."""

    model_config = ConfigDict(extra="forbid")
    text: str
    secret: str = Field(min_length=1)

    @model_validator(mode="after")
    def _secret_in_text(self) -> SecretExample:
        if self.secret not in self.text:
            raise ValueError(f"secret {self.secret!r} is not in its example text")
        return self


class RedactionPattern(BaseModel):
    """One secret shape (see ``rules/redaction.yaml`` for the fields)."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,63}$")
    pattern: str
    literals: list[str]
    replace: str = "<REDACTED>"
    block_end: str | None = None
    description: str = ""
    examples: Examples[SecretExample]

    @model_validator(mode="after")
    def _lower_literals(self) -> RedactionPattern:
        if any(lit != lit.lower() or not lit for lit in self.literals):
            raise ValueError(f"{self.name}: literals must be non-empty and lower-case")
        return self


class RedactionFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: int = 1
    patterns: list[RedactionPattern] = Field(default_factory=list)


class RedactionLoadError(ValueError):
    """Redaction rules that cannot be used; ``problems`` holds one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True, slots=True)
class _Compiled:
    name: str
    rx: regex.Pattern[str]
    replace: str
    grouped: bool
    end: regex.Pattern[str] | None


class Redactor:
    """The compiled patterns, in order, behind one literal prefilter."""

    def __init__(self, patterns: Iterable[RedactionPattern]) -> None:
        self.patterns = list(patterns)
        self._compiled = [
            _Compiled(
                p.name,
                regex.compile(p.pattern),
                p.replace,
                _has_group(p.pattern),
                regex.compile(p.block_end) if p.block_end else None,
            )
            for p in self.patterns
        ]
        self._always = tuple(i for i, p in enumerate(self.patterns) if not p.literals)
        self._auto = ahocorasick.Automaton()
        by_literal: dict[str, list[int]] = {}
        for i, p in enumerate(self.patterns):
            for lit in p.literals:
                by_literal.setdefault(lit, []).append(i)
        for lit, idx in by_literal.items():
            self._auto.add_word(lit, tuple(idx))
        self._usable = bool(by_literal)
        if self._usable:
            self._auto.make_automaton()

    def wanted(self, text: str) -> list[int] | tuple[int, ...]:
        """Indices of the patterns worth trying on ``text``, in order."""
        if not self._usable:
            return self._always
        hits = self._auto.iter(text.lower())
        first = next(hits, None)
        if first is None:  # the common case: one scan, nothing to try
            return self._always
        picked = set(self._always)
        picked.update(first[1])
        for _, idx in hits:
            picked.update(idx)
        return sorted(picked)

    def redact(
        self,
        text: str,
        stream: str | None = None,
        blocks: Blocks | None = None,
        *,
        counted: bool = True,
    ) -> str:
        """``text`` with every secret the patterns find replaced (counted per pattern in
        ``sentinel_redactions_total`` unless ``counted`` is False). ``stream`` and
        ``blocks`` (the caller's, e.g. a classifier's: stream → the pattern whose block is
        open): for patterns whose secret spans lines (``block_end``). The redactor itself
        holds no state, so threads may share it."""
        if len(text) > LINE_CAP:  # the parser reads no more, the store keeps no more
            text = text[: LINE_CAP - 1] + "…"
        if stream is not None and blocks and stream in blocks:
            return self._in_block(text, stream, blocks, counted)
        if not text:
            return text
        for i in self.wanted(text):
            c = self._compiled[i]
            count = 0

            def sub(m: regex.Match[str], c: _Compiled = c) -> str:
                nonlocal count
                whole = m.group(0)
                if not c.grouped:
                    if whole == c.replace:
                        return whole
                    count += 1
                    return c.replace
                s, e = m.span(SECRET_GROUP)
                if s < 0 or s == e or m.string[s:e] == c.replace:
                    return whole
                count += 1
                base = m.start()
                return whole[: s - base] + c.replace + whole[e - base :]

            before = text
            text = c.rx.sub(sub, text)
            if count and counted:
                metrics.REDACTIONS.labels(pattern=c.name).inc(count)
            if (
                stream is not None
                and blocks is not None
                and c.end is not None
                and c.rx.search(before) is not None
                and not c.end.search(text)
            ):
                blocks[stream] = i
                if len(blocks) > MAX_OPEN_BLOCKS:
                    blocks.popitem(last=False)
        return text

    def redact_lines(self, text: str) -> str:
        """A whole text (a pasted log) redacted line by line, a key over several lines
        included; not counted (the lines are counted when they are classified)."""
        blocks: Blocks = OrderedDict()
        return "\n".join(self.redact(ln, "text", blocks, counted=False) for ln in text.split("\n"))

    def _in_block(self, text: str, stream: str, blocks: Blocks, counted: bool) -> str:
        """A line inside an open block: replaced whole, or up to the block's end marker."""
        c = self._compiled[blocks[stream]]
        if counted:
            metrics.REDACTIONS.labels(pattern=c.name).inc()
        end = c.end.search(text) if c.end is not None else None
        if end is None:
            return c.replace
        del blocks[stream]
        return c.replace + text[end.start() :]

    def check_examples(self, names: Iterable[str] | None = None) -> list[str]:
        """Every example of the patterns named (default: all): one line per failure. A
        ``match`` example must lose its secret; a ``no_match`` example must pass through
        every pattern unchanged."""
        only = set(names) if names is not None else None
        failures = []
        for p in self.patterns:
            if only is not None and p.name not in only:
                continue
            for ex in p.examples.match:
                out = self.redact(ex.text, counted=False)
                if ex.secret in out:
                    failures.append(f"{p.name}: leaves its secret in: {ex.text[:160]}")
            for line in p.examples.no_match:
                if self.redact(line, counted=False) != line:
                    failures.append(f"{p.name}: changes its no_match example: {line[:160]}")
        return failures


def _has_group(pattern: str) -> bool:
    return SECRET_GROUP in regex.compile(pattern).groupindex


def _read(path: Path, problems: list[str]) -> list[RedactionPattern]:
    try:
        with path.open(encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
        parsed = RedactionFile.model_validate(data)
    except (OSError, yaml.YAMLError) as exc:
        problems.append(f"{path}: cannot read: {exc}")
        return []
    except ValidationError as exc:
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"])
            problems.append(f"{path}: {loc}: {err['msg'].removeprefix('Value error, ')}")
        return []
    out = []
    for p in parsed.patterns:
        try:
            regex.compile(p.pattern)
            regex.compile(p.block_end or "")
        except regex.error as exc:
            problems.append(f"{path}: {p.name}: pattern is not a valid regular expression: {exc}")
            continue
        out.append(p)
    return out


def load_redactor(rules_dir: Path, team_files: Iterable[Path] = ()) -> Redactor:
    """The shipped patterns of ``rules_dir/redaction.yaml``, then each team file's (a
    pattern with a shipped name replaces it). Raises :class:`RedactionLoadError` listing every
    problem, including any example that fails."""
    problems: list[str] = []
    by_name: dict[str, RedactionPattern] = {}
    for path in [rules_dir / REDACTION_FILE, *team_files]:
        if path == rules_dir / REDACTION_FILE and not path.is_file():
            continue
        for p in _read(path, problems):
            by_name[p.name] = p
    if problems:
        raise RedactionLoadError(problems)
    redactor = Redactor(by_name.values())
    failures = redactor.check_examples()
    if failures:
        raise RedactionLoadError(failures)
    return redactor
