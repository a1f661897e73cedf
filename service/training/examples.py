"""Training examples: loading them, refusing held-out data, leakage-free groups.

``<data>/*.jsonl`` holds one example a line (``text``, ``category``, ``tier``, ``source``,
``family``); files named ``ood*.jsonl`` (and examples labelled ``unknown``) hold
out-of-taxonomy error text, with no class of its own, used only to choose the abstain
thresholds. Corrections (``vllm-sentinel train --with-feedback``, JSONL of ``{text,
category}``, :mod:`service.training.feedback`) are added as examples of their own family;
a correction to ``unknown`` becomes out-of-taxonomy text. The held-out evaluation sets
(``tests/corpus`` and the blind sets ``tests/blind``, ``tests/blind2``, any ``tests/blind*``)
are refused as training data.

``<data>/real_threads/*.jsonl`` (and ``<data>/real_logs/*.jsonl``, lines of whole public logs,
same fields plus ``log_id``, ``line_no`` and ``context``) holds real physical log lines from public threads (fields
``line``, ``category``, ``role``, ``thread`` ...; ``training_data/real_threads/README.md``).
Each line is parsed as the classifier parses it (:func:`service.parse.line.parse_line`) and
its message is the example; its family is its thread, so cross-validation never puts one
thread on both sides. ``noise`` lines are labelled ``healthy``; lines labelled ``unknown``
(cascades with no cause of their own, out-of-taxonomy causes) only raise the abstain
thresholds, and only those the classifier would ask the model about (error-looking:
:func:`service.classify.findings.error_like`; a traceback frame or a bare wrapper never
reaches it); a cascade that repeats its cause's wording keeps the cause's category. Thread
lines are read first, so where a generated text masks to the same text, the real label wins.

:func:`prepare` masks every example into its key line and whole event
(:func:`service.classify.model_input.event_fields`) with its context (:mod:`.context`: a
real line's stream replayed, a lone text's own words), drops exact duplicates of a masked
text in the same context, caps examples per family, and puts families whose masked texts coincide into one
group (union-find), so no wording is ever on both sides of a split.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from service.classify.findings import error_like
from service.classify.model_context import ModelContext
from service.classify.model_input import event_fields
from service.classify.rulebook import RuleBook
from service.parse.line import parse_line
from service.taxonomy import CATEGORY_TIER

from .context import replay, text_context

__all__ = [
    "ORIGIN_GENERATED",
    "ORIGIN_STRING",
    "ORIGIN_THREAD",
    "REAL_LOGS",
    "REAL_THREADS",
    "UNKNOWN",
    "Example",
    "load_examples",
    "prepare",
]

UNKNOWN = "unknown"
REAL_THREADS = "real_threads"
REAL_LOGS = "real_logs"  # labelled lines of whole public logs (tests/whole_logs/README.md)
# where an example came from: a real line of a public thread, a generated variation, or a
# real string (seed wordings, captured healthy runs, vLLM's own log strings)
ORIGIN_THREAD, ORIGIN_GENERATED, ORIGIN_STRING = "thread", "generated", "string"


@dataclass(slots=True)
class Example:
    text: str
    category: str
    family: str
    source: str = ""
    stage: str | None = None
    masked: str = ""
    key: str = ""
    group: int = -1
    origin: str = ORIGIN_STRING
    asked: bool = True  # error-looking: the classifier would ask the model about it
    context: ModelContext | None = None  # what the stream knew around it (model_context)
    ctx: str = ""  # the context's words, as the model reads them
    extra: dict[str, Any] = field(default_factory=dict)


def _read_jsonl(path: Path, field_name: str = "text") -> list[dict[str, Any]]:
    rows = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise ValueError(f"{path}:{n}: not JSON: {exc}") from exc
            if not isinstance(row, dict) or not isinstance(row.get(field_name), str):
                raise ValueError(f"{path}:{n}: an example needs a string {field_name!r}")
            row["_where"] = f"{path.name}:{n}"
            rows.append(row)
    return rows


def _held_out(folder: str) -> bool:
    """``tests/corpus`` and every blind set (``tests/blind``, ``tests/blind2``...): evaluation only."""
    return folder == "corpus" or folder.startswith("blind")


def _replayed(rows: list[dict[str, Any]], key: str) -> None:
    """Each row's ``_context``: its stream's lines replayed in order (``key``: the row's
    stream id), as the classifier would have seen them (:func:`.context.replay`)."""
    streams: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        streams[str(row.get(key) or row["_where"])].append(row)
    contexts = replay(
        ((k, [r["line"] for r in rs]) for k, rs in streams.items()), RuleBook(with_signatures=True)
    )
    for row, ctx in zip((r for rs in streams.values() for r in rs), contexts, strict=True):
        row["_context"] = ctx


def _thread_rows(data_dir: Path) -> list[dict[str, Any]]:
    """The real thread lines as example rows: the parsed message, the thread as family, the
    context its thread's lines give it."""
    raw: list[dict[str, Any]] = []
    paths = [*(data_dir / REAL_THREADS).glob("*.jsonl"), *(data_dir / REAL_LOGS).glob("*.jsonl")]
    for path in sorted(paths):
        raw.extend(_read_jsonl(path, "line"))
    _replayed(raw, "thread")
    rows = []
    for row in raw:
        cat = "healthy" if row.get("role") == "noise" else row.get("category")
        line = parse_line(row["line"])
        if cat == UNKNOWN and error_like(line, frozenset()) is None:
            continue  # never asked of the model: no say in its thresholds
        rows.append(
            {
                **row,
                "text": line.message,
                "category": cat,
                "tier": None,
                "family": f"thread:{row.get('thread') or row['_where']}",
                "_origin": ORIGIN_THREAD,
                "_asked": error_like(line, frozenset()) is not None,
            }
        )
    return rows


def load_examples(
    data_dir: Path, feedback: Path | None = None
) -> tuple[list[Example], list[Example]]:
    """(labelled examples, out-of-taxonomy texts) from ``data_dir`` (+ corrections)."""
    data_dir = Path(data_dir)
    parts = data_dir.resolve().parts
    if any(a == "tests" and _held_out(b) for a, b in zip(parts, parts[1:], strict=False)):
        raise ValueError(f"{data_dir} is a held-out evaluation set, never training data")
    files = sorted(data_dir.glob("*.jsonl"))
    if not files:
        raise FileNotFoundError(f"no *.jsonl training files in {data_dir}")
    examples: list[Example] = []
    ood: list[Example] = []
    batches: list[tuple[bool, list[dict[str, Any]]]] = [(False, _thread_rows(data_dir))]
    for path in files:
        origin = ORIGIN_GENERATED if path.stem == "generated" else ORIGIN_STRING
        rows = _read_jsonl(path)
        for row in rows:
            row.setdefault("family", f"{path.stem}:{row['_where']}")
            row["_origin"] = origin
        batches.append((path.name.startswith("ood"), rows))
    for is_ood, rows in batches:
        for row in rows:
            cat = row.get("category")
            fam = str(row.get("family") or row["_where"])
            context = row.get("_context") or text_context(row["text"], str(row.get("source", "")))
            if is_ood or cat == UNKNOWN:
                ood.append(
                    Example(
                        row["text"],
                        UNKNOWN,
                        fam,
                        str(row.get("source", "")),
                        origin=row["_origin"],
                        context=context,
                    )
                )
                continue
            if cat not in CATEGORY_TIER:
                raise ValueError(f"{row['_where']}: category {cat!r} is not in the taxonomy")
            tier = row.get("tier")
            if tier is not None and tier != CATEGORY_TIER[cat]:
                raise ValueError(
                    f"{row['_where']}: tier {tier!r} does not match {cat!r} "
                    f"({CATEGORY_TIER[cat]!r})"
                )
            asked = row.get("_asked")
            if asked is None:
                first = parse_line(row["text"].split("\n", 1)[0])
                asked = error_like(first, frozenset()) is not None
            examples.append(
                Example(
                    row["text"],
                    cat,
                    fam,
                    str(row.get("source", "")),
                    row.get("stage"),
                    origin=row["_origin"],
                    asked=bool(asked),
                    context=context,
                )
            )
    if feedback is not None:
        for i, row in enumerate(_read_jsonl(Path(feedback))):
            cat = row.get("category")
            fam = f"feedback:{i}"
            context = text_context(row["text"])
            if cat == UNKNOWN:
                ood.append(Example(row["text"], UNKNOWN, fam, "feedback", context=context))
            elif cat in CATEGORY_TIER:
                examples.append(Example(row["text"], cat, fam, "feedback", context=context))
            else:
                raise ValueError(f"feedback {row['_where']}: unknown category {cat!r}")
    return examples, ood


def prepare(
    examples: list[Example], max_per_family: int, seed: int, max_generated: int | None = None
) -> list[Example]:
    """Mask, drop duplicate masked texts, cap examples per family (generated variations of
    one wording at ``max_generated``: augmentation, not the bulk), assign leakage-free groups."""
    for ex in examples:
        ex.key, ex.masked, ex.ctx = event_fields(ex.text, ex.context)
    seen: dict[tuple[str, str], Example] = {}
    kept: list[Example] = []
    first_of: dict[str, Example] = {}
    conflicts = 0
    # union-find over family ids, joined whenever two families share a masked text
    parent: dict[str, str] = {}

    def find(a: str) -> str:
        parent.setdefault(a, a)
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    def union(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    for ex in examples:
        if not ex.masked.strip():
            continue
        find(ex.family)
        first = first_of.setdefault(ex.masked, ex)
        if first is not ex:  # one wording, in any context, is one group
            union(first.family, ex.family)
        prev = seen.get((ex.masked, ex.ctx))
        if prev is None:
            seen[(ex.masked, ex.ctx)] = ex
            kept.append(ex)
        else:
            union(prev.family, ex.family)
            if prev.category != ex.category:
                conflicts += 1
    if conflicts:
        # the same masked text under two labels: keep the first, the data file order decides
        print(f"[train] warning: {conflicts} masked texts carry two labels", file=sys.stderr)
    rng = np.random.default_rng(seed)
    by_family: dict[str, list[Example]] = defaultdict(list)
    for ex in kept:
        by_family[ex.family].append(ex)
    capped: list[Example] = []
    for fam in sorted(by_family):
        items = by_family[fam]
        if max_generated is not None:
            gen = [e for e in items if e.origin == ORIGIN_GENERATED]
            if len(gen) > max_generated:
                keep = {id(gen[i]) for i in rng.choice(len(gen), size=max_generated, replace=False)}
                items = [e for e in items if e.origin != ORIGIN_GENERATED or id(e) in keep]
        if len(items) > max_per_family:
            idx = sorted(rng.choice(len(items), size=max_per_family, replace=False))
            items = [items[i] for i in idx]
        capped.extend(items)
    roots = sorted({find(ex.family) for ex in capped})
    gid = {r: i for i, r in enumerate(roots)}
    for ex in capped:
        ex.group = gid[find(ex.family)]
    return capped
