"""All rule patterns compiled into one matcher: the linear-time multi-pattern engine
(:mod:`.multimatch`) says which patterns match a line; a matched line is searched again
only by the patterns it matched, to give their match (spans, groups), with RE2 (linear
time). Lines the engine does not answer (non-ASCII) take the exact path: an Aho-Corasick
literal prefilter, then the few candidate regexes, each bounded in time."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from re import _constants as sre_constants  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]
from typing import Any

import ahocorasick
import regex

from service.classify.multimatch import MultiMatcher, linear_regex
from service.classify.rules import Signature

log = logging.getLogger(__name__)

MATCH_TIMEOUT_S = 0.05
MIN_LITERAL = 4


def derive_literals(pattern: str) -> list[str] | None:
    """Literal strings of which at least one occurs in every match of ``pattern``.

    Walks the parsed pattern: a sequence requires its best required piece (a literal run, a
    group, an alternation whose every branch requires something, a repeat of at least one);
    the best piece is the one whose shortest alternative is longest. Returns ``None`` when no
    alternative of at least 4 characters can be proven.
    """
    try:
        parsed = sre_parse.parse(pattern)
    except Exception:  # noqa: BLE001 - regex-only syntax: caller falls back
        return None
    return _required(list(parsed))


def max_width(pattern: str) -> int | None:
    """The longest string ``pattern`` can match, or None when unbounded or unknown."""
    try:
        hi = sre_parse.parse(pattern).getwidth()[1]
    except Exception:  # noqa: BLE001 - regex-only syntax: treated as unbounded
        return None
    return None if hi >= sre_constants.MAXREPEAT else int(hi)


def _required(items: Sequence[Any]) -> list[str] | None:
    candidates: list[list[str]] = []
    run: list[str] = []

    def flush() -> None:
        text = "".join(run).strip()
        if len(text) >= MIN_LITERAL:
            candidates.append([text])
        run.clear()

    for op, av in items:
        if op is sre_constants.LITERAL:
            run.append(chr(av))
            continue
        flush()
        sub: list[str] | None = None
        if op is sre_constants.SUBPATTERN:
            sub = _required(list(av[-1]))
        elif op is sre_constants.BRANCH:
            alts: list[str] = []
            for branch in av[1]:
                got = _required(list(branch))
                if got is None:
                    alts = []
                    break
                alts.extend(got)
            sub = alts or None
        elif op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT) and av[0] >= 1:
            sub = _required(list(av[2]))
        if sub:
            candidates.append(sub)
    flush()
    if not candidates:
        return None
    return max(candidates, key=lambda c: (min(len(a) for a in c), -len(c)))


class PatternIndex:
    """Many regexes behind one Aho-Corasick literal prefilter; benign lines cost one scan."""

    def __init__(
        self, patterns: Sequence[tuple[str, list[str] | None, bool]], name: str = ""
    ) -> None:
        """``patterns``: (regex, literals or None to derive, case_sensitive)."""
        self._compiled: list[Any] = []
        self._width: list[int | None] = []  # longest possible match (None: unbounded)
        self._always: list[int] = []
        self._auto = ahocorasick.Automaton()
        by_literal: dict[str, list[int]] = {}
        for idx, (pattern, literals, case_sensitive) in enumerate(patterns):
            flags = 0 if case_sensitive else regex.IGNORECASE
            self._compiled.append(regex.compile(pattern, flags | regex.VERSION0))
            # windows are safe only where every match provably holds a literal (derived)
            self._width.append(None if literals else max_width(pattern))
            lits = literals or derive_literals(pattern)
            if not lits:
                log.warning(
                    "%s pattern %r has no literal prefilter; it runs on every line", name, pattern
                )
                self._always.append(idx)
                continue
            for lit in lits:
                by_literal.setdefault(lit.lower(), []).append(idx)
        self.literals = sorted(by_literal)  # lowercased; what the prefilter looks for
        for lit, idxs in by_literal.items():
            self._auto.add_word(lit, (len(lit), tuple(idxs)))
        self._has_auto = bool(by_literal)
        if self._has_auto:
            self._auto.make_automaton()
        self._engine = MultiMatcher([(p, cs) for p, _, cs in patterns])
        self._extract = [linear_regex(p, cs) for p, _, cs in patterns]
        plan = self._engine.plan
        self._unseen = sorted(plan.unseen)
        self._confirm = plan.confirm | plan.unseen  # matched by the engine: not yet final

    @property
    def has_unfiltered(self) -> bool:
        """Whether some pattern runs on every line (no literal could be derived)."""
        return bool(self._always)

    def candidates(self, message: str) -> set[int]:
        return set(self._always) | set(self._spans(message))

    def _spans(self, message: str) -> dict[int, list[tuple[int, int]]]:
        """Candidate pattern → where its literals occur in ``message`` (start, end)."""
        spans: dict[int, list[tuple[int, int]]] = {}
        if self._has_auto:
            for end, (n, idxs) in self._auto.iter(message.lower()):
                for idx in idxs:
                    spans.setdefault(idx, []).append((end - n + 1, end + 1))
        return spans

    def search(self, message: str) -> list[tuple[int, Any]]:
        """(pattern index, match) for every pattern that matches ``message``: the engine's
        answer, or the exact path for a line it does not answer."""
        if not message:
            return []
        found = self._engine.matching(message)
        if found is None:
            return self.search_exact(message)
        if self._unseen:
            found = sorted({*found, *self._unseen})
        hits: list[tuple[int, Any]] = []
        for idx in found:
            m: Any = None
            if idx not in self._confirm and self._extract[idx] is not None:
                m = LazyMatch(self._extract[idx], message)
            else:
                try:
                    m = self._compiled[idx].search(message, timeout=MATCH_TIMEOUT_S)
                except TimeoutError:
                    log.warning("pattern %d timed out on a %d-char line", idx, len(message))
            if m is not None:
                hits.append((idx, m))
        return hits

    def search_exact(self, message: str) -> list[tuple[int, Any]]:
        """(pattern index, match) for every pattern that matches ``message``, by the
        prefilter and the bounded regexes.

        A pattern of bounded width is searched only around the occurrences of its literals
        (every match contains one, so it lies within ``width`` of it): a long line full of
        literals costs what the few windows cost, with the same first match."""
        if not message:
            return []
        spans = self._spans(message)
        cands = set(self._always) | set(spans)
        if not cands:
            return []
        n = len(message)
        located = n == len(message.lower())  # lowercasing kept every position
        hits: list[tuple[int, Any]] = []
        for idx in sorted(cands):
            width = self._width[idx]
            try:
                if width is None or idx not in spans or not located or 2 * width >= n:
                    m = self._compiled[idx].search(message, timeout=MATCH_TIMEOUT_S)
                else:
                    m = self._windowed(idx, message, spans[idx], width)
            except TimeoutError:
                log.warning("pattern %d timed out on a %d-char line", idx, len(message))
                continue
            if m is not None:
                hits.append((idx, m))
        return hits

    def _windowed(self, idx: int, message: str, spans: list[tuple[int, int]], width: int) -> Any:
        n = len(message)
        windows: list[list[int]] = []
        for start, end in sorted(spans):
            a, b = max(0, start - width), min(n, end + width + 1)
            if windows and a <= windows[-1][1]:
                windows[-1][1] = max(windows[-1][1], b)
            else:
                windows.append([a, b])
        pattern = self._compiled[idx]
        for a, b in windows:  # disjoint and in order: the first match found is the first
            m = pattern.search(message, a, b, timeout=MATCH_TIMEOUT_S)
            if m is not None:
                return m
        return None


class LazyMatch:
    """The match of a pattern the engine found in a line, searched (RE2) only when asked
    for: most hits need only the fact that they match."""

    __slots__ = ("_pattern", "_text", "_m")

    def __init__(self, pattern: Any, text: str) -> None:
        self._pattern, self._text, self._m = pattern, text, None

    def _match(self) -> Any:
        if self._m is None:
            self._m = self._pattern.search(self._text)
        return self._m

    def group(self, *index: int | str) -> Any:
        return self._match().group(*index)

    def groups(self) -> tuple[Any, ...]:
        return tuple(self._match().groups())

    def span(self, index: int | str = 0) -> tuple[int, int]:
        return tuple(self._match().span(index))

    def start(self, index: int | str = 0) -> int:
        return int(self._match().start(index))

    def end(self, index: int | str = 0) -> int:
        return int(self._match().end(index))


class SignatureMatcher:
    """Finds the signatures matching one message, best (highest priority) first."""

    def __init__(self, signatures: Iterable[Signature]) -> None:
        self.signatures = list(signatures)
        self._index = PatternIndex(
            [(s.pattern, s.literals, s.case_sensitive) for s in self.signatures], "signature"
        )

    def match(self, message: str) -> list[tuple[Signature, Any]]:
        hits = [(self.signatures[i], m) for i, m in self._index.search(message)]
        hits.sort(key=lambda h: -h[0].priority)
        return hits
