"""Every rule pattern in ONE linear-time multi-pattern engine: a Hyperscan database scanned
once per line, reporting which patterns match (docs/architecture.md, "Matching").

* Hyperscan takes the patterns it can match exactly; a pattern it refuses (a lookaround)
  is compiled in its prefilter mode (a superset) and confirmed on the lines it flags.
* Without Hyperscan (a platform without the wheel) a RE2 set takes every pattern RE2 can
  (logged once); the rest are confirmed like the prefiltered ones.
* The engine speaks ASCII semantics (``\\w``, ``\\d``, ``\\s``, ``\\b``, case folding), which
  equal Python's on ASCII text without the separators ``\\x1c``-``\\x1f``: only such lines
  are answered here (:meth:`MultiMatcher.matching` returns None for the others).

Building a database is cached on disk, keyed by the digest of the patterns, their flags
and the engine's version (:func:`cache_dir`), and checked against that digest on load.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import re2

try:  # the wheel bundles the library; a platform without it falls back to RE2
    import hyperscan
except ImportError:  # pragma: no cover - exercised by monkeypatching in the tests
    hyperscan = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

CACHE_ENV = "SENTINEL_CACHE_DIR"
_ODD = re.compile("[\x1c-\x1f]")  # ASCII that Python's \s matches and the engines' does not


def cache_dir() -> Path:
    """``$SENTINEL_CACHE_DIR``, else ``$XDG_CACHE_HOME/vllm-sentinel``, else
    ``~/.cache/vllm-sentinel``."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vllm-sentinel"


class PatternError(ValueError):
    """A pattern no engine here can take."""


@dataclass(frozen=True, slots=True)
class Plan:
    """How each pattern is answered: ``exact`` ids are final, ``confirm`` ids are
    candidates a line must still be searched for, ``unseen`` ids are not in the engine
    (the caller searches every line for them)."""

    exact: frozenset[int]
    confirm: frozenset[int]
    unseen: frozenset[int]


def linear_regex(pattern: str, case_sensitive: bool) -> Any:
    """``pattern`` compiled by RE2 (on ASCII text its matches and groups are Python's),
    or None when RE2 cannot take it."""
    opts = re2.Options()
    opts.case_sensitive = case_sensitive
    opts.log_errors = False
    try:
        return re2.compile(pattern, opts)
    except re2.error:
        return None


def unsupported(pattern: str, case_sensitive: bool = False) -> str | None:
    """Why the engine cannot take ``pattern`` (None: it can)."""
    if hyperscan is None:
        return None  # the RE2 set searches what it cannot take on every line
    try:
        _hs_flags(pattern, case_sensitive)
    except PatternError as exc:
        return str(exc)
    return None


class MultiMatcher:
    """One database of ``patterns`` ((regex, case_sensitive) each)."""

    def __init__(self, patterns: Sequence[tuple[str, bool]], cache: Path | None = None) -> None:
        self._hs: Any = None
        self._set: Any = None
        self._local = threading.local()  # a scan's scratch space is one thread's
        self.engine = "hyperscan" if hyperscan is not None else "re2"
        self.plan: Plan
        if hyperscan is None:
            log.warning("hyperscan cannot be imported: every rule runs in one RE2 set instead")
            self.plan = self._build_set(patterns)
        else:
            self.plan = self._build_hs(patterns, cache_dir() if cache is None else cache)

    # ---- building ------------------------------------------------------------------------
    def _build_set(self, patterns: Sequence[tuple[str, bool]]) -> Plan:
        exact: list[int] = []
        sensitive = re2.Set.SearchSet(re2.Options())
        self._set_ids: list[int] = []
        for idx, (pattern, cs) in enumerate(patterns):
            if linear_regex(pattern, cs) is None:
                continue
            sensitive.Add(pattern if cs else f"(?i:{pattern})")
            self._set_ids.append(idx)
            exact.append(idx)
        sensitive.Compile()
        self._set = sensitive
        rest = frozenset(range(len(patterns))) - set(exact)
        if rest:
            log.warning(
                "RE2 cannot take %d rule patterns: they are searched on every line", len(rest)
            )
        return Plan(frozenset(exact), frozenset(), rest)

    def _build_hs(self, patterns: Sequence[tuple[str, bool]], cache: Path) -> Plan:
        key = _digest(list(patterns), str(getattr(hyperscan, "__version__", "")))
        loaded = _load(cache, key)
        if loaded is None:
            flags = [_hs_flags(p, cs) for p, cs in patterns]
            loaded = _compile(patterns, flags, cache, key)
        self._hs, flags = loaded
        self._local.scratch = hyperscan.Scratch(self._hs)  # this thread's; others: on demand
        confirm = {i for i, f in enumerate(flags) if f & hyperscan.HS_FLAG_PREFILTER}
        return Plan(frozenset(range(len(patterns))) - confirm, frozenset(confirm), frozenset())

    # ---- matching ------------------------------------------------------------------------
    def matching(self, text: str) -> list[int] | None:
        """The ids of the patterns matching ``text`` (prefiltered ones: candidates, see
        :attr:`plan`), or None when ``text`` is not plain ASCII (the caller decides)."""
        if not text.isascii() or _ODD.search(text) is not None:
            return None
        if self._set is not None:
            ids = self._set_ids
            return sorted(ids[i] for i in self._set.Match(text) or ())
        hits: list[int] = []
        self._hs.scan(
            text.encode(), match_event_handler=_add_id, context=hits, scratch=_scratch(self)
        )
        hits.sort()
        return hits


def _scratch(owner: MultiMatcher | LiteralScanner) -> Any:
    """The calling thread's scratch space for ``owner``'s database."""
    scratch = getattr(owner._local, "scratch", None)
    if scratch is None:
        scratch = owner._local.scratch = hyperscan.Scratch(owner._hs)
    return scratch


def _add_id(idx: int, _from: int, _to: int, _flags: int, hits: list[int]) -> None:
    hits.append(idx)


def _add_end(_idx: int, _from: int, to: int, _flags: int, ends: list[int]) -> None:
    ends.append(to - 1)


def _hs_flags(pattern: str, case_sensitive: bool) -> int:
    """Exact when Hyperscan takes ``pattern``, else its prefilter mode; PatternError when
    neither."""
    base = hyperscan.HS_FLAG_SINGLEMATCH | (0 if case_sensitive else hyperscan.HS_FLAG_CASELESS)
    for flags in (base, base | hyperscan.HS_FLAG_PREFILTER):
        try:
            hyperscan.Database().compile(expressions=[pattern.encode()], ids=[0], flags=[flags])
        except hyperscan.error:
            continue
        return flags
    raise PatternError(
        f"pattern {pattern!r}: Hyperscan cannot compile it, exactly or as a prefilter; "
        "rewrite it (no backreferences, no lookbehind)"
    )


def _digest(entries: list[tuple[str, bool]], version: str) -> str:
    return hashlib.sha256(json.dumps([version, entries]).encode()).hexdigest()


def _load(cache: Path, key: str) -> tuple[Any, list[int]] | None:
    """The cached database of ``key`` and its flags, or None (missing, unreadable, or not
    what its digest says: rebuilt). The file: a JSON header line, the serialized database,
    the SHA-256 of both."""
    path = cache / f"rules-{key}.hsdb"
    try:
        data = path.read_bytes()
    except OSError:
        return None
    body, digest = data[:-32], data[-32:]
    head, _, blob = body.partition(b"\n")
    try:
        flags = json.loads(head)
        ok = hashlib.sha256(body).digest() == digest and flags["key"] == key
        db = hyperscan.loadb(blob, hyperscan.HS_MODE_BLOCK) if ok else None
    except (ValueError, KeyError, TypeError, hyperscan.error):
        db = None
    if db is None:
        log.warning("rule database cache %s does not match its digest: rebuilding it", path)
        return None
    return db, [int(f) for f in flags["flags"]]


def _compile(
    patterns: Sequence[tuple[str, bool]], flags: list[int], cache: Path, key: str
) -> tuple[Any, list[int]]:
    """Build the database (and cache it; a cache that cannot be written is logged)."""
    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    db.compile(
        expressions=[p.encode() for p, _ in patterns], ids=list(range(len(flags))), flags=flags
    )
    body = json.dumps({"key": key, "flags": flags}).encode() + b"\n" + hyperscan.dumpb(db)
    path = cache / f"rules-{key}.hsdb"
    try:
        cache.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(body + hashlib.sha256(body).digest())
        tmp.replace(path)
    except OSError as exc:
        log.warning("cannot cache the rule database in %s: %s", cache, exc)
    return db, flags


class LiteralScanner:
    """Where any of ``words`` ends (caseless) in an ASCII block: one Hyperscan scan of the
    whole block (None without Hyperscan or for a non-ASCII block: the caller's own)."""

    def __init__(self, words: Sequence[str]) -> None:
        self._hs: Any = None
        self._local = threading.local()
        uniq = sorted({w.lower() for w in words if w})
        self.words: tuple[str, ...] = tuple(uniq)  # ids of :meth:`found`
        if hyperscan is None or not uniq or not all(w.isascii() for w in uniq):
            return
        db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        db.compile(
            expressions=["".join(f"\\x{ord(c):02x}" for c in w).encode() for w in uniq],
            ids=list(range(len(uniq))),
            flags=[hyperscan.HS_FLAG_CASELESS] * len(uniq),
        )
        self._hs = db
        self._local.scratch = hyperscan.Scratch(db)

    def ends(self, text: str) -> list[int] | None:
        """The index of the last character of every occurrence, in order, or None."""
        if self._hs is None or not text.isascii():
            return None
        ends: list[int] = []
        self._hs.scan(
            text.encode(), match_event_handler=_add_end, context=ends, scratch=_scratch(self)
        )
        ends.sort()
        return ends

    def found(self, text: str) -> list[tuple[int, int]] | None:
        """(end, word id) of every occurrence, overlapping ones included (``end``: one past
        its last character; the id indexes :attr:`words`), in no set order; or None."""
        if self._hs is None or not text.isascii():
            return None
        hits: list[tuple[int, int]] = []
        self._hs.scan(
            text.encode(), match_event_handler=_add_hit, context=hits, scratch=_scratch(self)
        )
        return hits


def _add_hit(idx: int, _from: int, to: int, _flags: int, hits: list[tuple[int, int]]) -> None:
    hits.append((to, idx))
