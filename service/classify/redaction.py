"""Redaction at the door: secret-shaped values masked in a log line before anything reads it.

The patterns are data (``rules/redaction.yaml``, extended by a team's ``redaction.yaml``),
each with examples that are run as tests at load. :meth:`Redactor.redact` is called on every
line the classifier is fed (:meth:`service.classify.engine.Classifier.feed`), so the secret
never reaches classification, evidence, facts, the store, a page or a reply. One literal scan
per line (Hyperscan on an ASCII line, else an Aho-Corasick automaton over the lower-cased
line: the same answer) picks the patterns whose literals the line holds; a line with none
costs that scan alone. Every replacement is counted in ``sentinel_redactions_total{pattern}``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import ahocorasick
import regex
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from service import metrics
from service.classify.multimatch import LiteralScanner
from service.classify.rules import Examples
from service.classify.secret_spans import LINE_CAP, Found, cut, replace, window
from service.classify.unlayer import unlayer
from service.records import Meta

REDACTION_FILE = "redaction.yaml"
MAX_OPEN_BLOCKS = 4096  # streams with a multi-line secret open at once (the oldest goes)
SECRET_GROUP = "secret"
LABEL_CACHE = 4096  # distinct label sets remembered as masked
VALUE_CACHE = 4096  # distinct envelope values (names, images, tags) remembered as masked
VALUE_CACHE_MAX_CHARS = 512  # a longer value is redacted each time
SENTINEL_VALUE = "Zq7xWv3Kp9Lm2Rt8"  # a value any secret-named key would lose
# the text fields of Meta (service.records) masked beside the line
META_TEXT: tuple[str, ...] = (
    "namespace",
    "pod",
    "container",
    "container_id",
    "pod_id",
    "node",
    "image",
    "image_id",
    "tag",
)
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
    anchored: bool = False  # every match starts where one of the literals does
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
    anchored: bool


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
                p.anchored and bool(p.literals),
            )
            for p in self.patterns
        ]
        self._replacements = [c.replace for c in self._compiled]
        self._always = tuple(i for i, p in enumerate(self.patterns) if not p.literals)
        self._auto = ahocorasick.Automaton()
        by_literal: dict[str, list[int]] = {}
        for i, p in enumerate(self.patterns):
            for lit in p.literals:
                by_literal.setdefault(lit, []).append(i)
        for lit, idx in by_literal.items():
            self._auto.add_word(lit, (len(lit), tuple(idx)))
        self._usable = bool(by_literal)
        # the ASCII literals in one Hyperscan database, for ASCII lines (no other literal
        # can occur in one; the automaton is for the rest): a line with none of them costs
        # one scan, no lower-cased copy
        self._scanner = LiteralScanner([w for w in by_literal if w.isascii()])
        self._word_idx = [tuple(by_literal[w]) for w in self._scanner.words]
        # pods' labels, as they came → as masked (a pod's records carry the same labels)
        self._labels: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
        # envelope values, as they came → as masked (a stream's records repeat them)
        self._values: dict[str, str] = {}
        if self._usable:
            self._auto.make_automaton()

    def wanted(self, text: str) -> dict[int, list[int]]:
        """The patterns worth trying on ``text`` (index → where their literals start in
        it, in order), in the patterns' order."""
        if not self._usable:
            return dict.fromkeys(self._always, [])
        picked: dict[int, list[int]] = {}
        hits = self._scanner.found(text)
        if hits is not None:  # ASCII: where each literal starts, as in the lower-cased line
            if not hits:  # the common case: one scan, nothing to try
                return dict.fromkeys(self._always, [])
            words, word_idx = self._scanner.words, self._word_idx
            for end, w in hits:
                start = end - len(words[w])
                for i in word_idx[w]:
                    picked.setdefault(i, []).append(start)
            fold_changed = False
        else:
            low = text.lower()
            for end, (size, idx) in self._auto.iter(low):
                for i in idx:
                    picked.setdefault(i, []).append(end - size + 1)
            fold_changed = len(low) != len(text)
        if not picked:  # the common case: one scan, nothing to try
            return dict.fromkeys(self._always, [])
        for i in self._always:
            picked.setdefault(i, [])
        if fold_changed:  # a case fold changed lengths: no anchors
            return {i: [] for i in sorted(picked)}
        return {i: sorted(picked[i]) for i in sorted(picked)}

    def redact(
        self,
        text: str,
        stream: str | None = None,
        blocks: Blocks | None = None,
        *,
        counted: bool = True,
    ) -> str:
        """``text`` with every secret the patterns find replaced (counted per pattern in
        ``sentinel_redactions_total`` unless ``counted`` is False). The patterns look at the
        line with its layers undone (:func:`~service.classify.unlayer.unlayer`: escapes,
        percent-encoding, look-alikes); what they find is replaced in the line as it came,
        which keeps its form elsewhere. A line longer than :data:`LINE_CAP` is cut there
        after it is redacted, so a secret straddling the cut is masked whole. ``stream``
        and ``blocks`` (the caller's, e.g. a classifier's: stream → the pattern whose block
        is open): for patterns whose secret spans lines (``block_end``). The redactor
        itself holds no state, so threads may share it."""
        if len(text) > LINE_CAP:  # the parser reads no more, the store keeps no more
            return cut(self._redact(window(text), stream, blocks, counted))
        return self._redact(text, stream, blocks, counted)

    def _redact(self, text: str, stream: str | None, blocks: Blocks | None, counted: bool) -> str:
        if stream is not None and blocks and stream in blocks:
            return self._in_block(text, stream, blocks, counted)
        if not text:
            return text
        plain = unlayer(text)
        spans: list[tuple[int, int, int]] = []  # (start, end, pattern) in the line as it came
        found = Found()  # what the patterns before this one masked
        for i, starts in self.wanted(plain.text).items():
            c = self._compiled[i]
            count = 0
            for m in _matches(c, plain.text, starts):
                s, e = m.span(SECRET_GROUP) if c.grouped else m.span()
                if s < 0 or s == e:
                    continue
                s, e = plain.span(s, e)
                if text[s:e] == c.replace or found.covers(s, e):
                    continue
                spans.append((s, e, i))
                count += 1
            if count:
                found.add(spans[-count:])
            if count and counted:
                metrics.REDACTIONS.labels(pattern=c.name).inc(count)
            if stream is not None and blocks is not None and c.end is not None:
                self._open_block(plain.text, c, i, stream, blocks)
        return replace(text, spans, self._replacements) if spans else text

    def _open_block(self, plain: str, c: _Compiled, i: int, stream: str, blocks: Blocks) -> None:
        """A multi-line secret whose start is on this line and whose end is not: the
        stream's next lines are in its block."""
        assert c.end is not None
        m = c.rx.search(plain)
        if m is not None and not c.end.search(plain, m.start()):
            blocks[stream] = i
            if len(blocks) > MAX_OPEN_BLOCKS:
                blocks.popitem(last=False)

    def redact_value(self, text: str) -> str:
        """``text`` redacted alone (no multi-line block, not counted): a pure function of
        it, so a short one is remembered (a stream's records repeat their envelope: its
        name, pod, image, tag)."""
        done = self._values.get(text)
        if done is not None:
            return done
        done = self.redact(text, counted=False)
        if len(text) <= VALUE_CACHE_MAX_CHARS:
            if len(self._values) >= VALUE_CACHE:
                self._values.clear()
            self._values[text] = done
        return done

    def redact_meta(self, meta: Meta) -> None:
        """Mask, in place, what a record's envelope carries beside its line: its text
        fields (pod, image, tag ...) and its labels, keys and values; a label whose key
        names a secret (``api-token: ...``) loses its value whatever it holds."""
        plain = cast(dict[str, object], meta)
        for key in META_TEXT:
            v = plain.get(key)
            if type(v) is str and v:
                plain[key] = self.redact_value(v)
        labels = meta.get("labels")
        if labels:
            items = tuple((k, v if isinstance(v, str) else str(v)) for k, v in labels.items())
            cached = self._labels.get(items)
            if cached is not None:
                meta["labels"] = dict(cached)
                return
            out: dict[str, str] = {}
            for k, v in items:
                rk, rv = self.redact(k, counted=False), self.redact(v, counted=False)
                if rv == v and self.redact(f"{k}={SENTINEL_VALUE}", counted=False) != (
                    f"{k}={SENTINEL_VALUE}"
                ):
                    rv = "<REDACTED>"
                out[rk] = rv
            if len(self._labels) >= LABEL_CACHE:
                self._labels.clear()
            self._labels[items] = out
            meta["labels"] = dict(out)

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
                elif self.redact(out, counted=False) != out:
                    failures.append(f"{p.name}: masks its own output again: {out[:160]}")
            for line in p.examples.no_match:
                if self.redact(line, counted=False) != line:
                    failures.append(f"{p.name}: changes its no_match example: {line[:160]}")
        return failures


def _matches(c: _Compiled, text: str, starts: list[int]) -> Iterator[regex.Match[str]]:
    """``c``'s matches in ``text``: tried only where a literal starts when it is anchored
    (a keyword's alternation tried at every character would cost far more), else all."""
    if not c.anchored or not starts:
        yield from c.rx.finditer(text)
        return
    after = 0
    for st in starts:
        if st < after:
            continue
        m = c.rx.match(text, st)
        if m is not None:
            after = max(m.end(), st + 1)
            yield m


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
