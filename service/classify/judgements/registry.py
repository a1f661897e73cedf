"""The judgements by name: which kinds exist (:data:`KINDS`: every module of this package
that declares a ``KIND``, found when the package is imported, as a problem daemon registers
its monitors by name), ``rules/judgements.yaml`` validated against them
(:class:`JudgementRules`: each kind's block; a team's file merged on key by key), and the
judges the classifier runs (:class:`Judges`: the enabled kinds, in their ``runs`` order).

Adding a judgement: a module under ``judgements/`` with its ``KIND`` and its block in
``rules/judgements.yaml``; nothing else changes, this module included.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, create_model

from service.classify import judgements
from service.classify.events import Seen
from service.classify.judgements.judge import C, Config, Judge, Kind
from service.classify.judgements.judgement import Judgement
from service.classify.rules import RULES_DIR, PlaybookRules, load_yaml, merge_judgements
from service.classify.stream_state import StreamState
from service.incidents.incident import Change, CrashLoop, Incident

# Every judgement kind of this package (a module's ``KIND``), in the order the judges run.
_MODULES = [
    importlib.import_module(f"{__package__}.{m.name}")
    for m in pkgutil.iter_modules(judgements.__path__)
]
KINDS: tuple[Kind[Any], ...] = tuple(
    sorted(
        (k for mod in _MODULES if isinstance(k := getattr(mod, "KIND", None), Kind)),
        key=lambda k: (k.runs, k.name),
    )
)

_FIELDS: dict[str, Any] = {"version": (Literal[1], ...)} | {k.name: (k.config, ...) for k in KINDS}
_FILE: type[BaseModel] = create_model(  # the file: its version and one block per kind
    "JudgementsFile", __config__=ConfigDict(extra="forbid", frozen=True), **_FIELDS
)


class JudgementRules:
    """``rules/judgements.yaml`` validated: each kind's block (:meth:`get`; ``rules.stalls``
    and the like read a block by its name, untyped)."""

    def __init__(self, blocks: Mapping[str, Config]) -> None:
        self.blocks = dict(blocks)

    @classmethod
    def validate(cls, data: Any) -> JudgementRules:
        """:class:`pydantic.ValidationError` (``block.key: problem``) when not valid."""
        model = _FILE.model_validate(data)
        return cls({k.name: getattr(model, k.name) for k in KINDS})

    def get(self, kind: Kind[C]) -> C:
        block = self.blocks[kind.name]
        assert isinstance(block, kind.config)
        return block

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["blocks"][name]
        except KeyError:
            raise AttributeError(name) from None

    def override(self, kind: Kind[C], **values: Any) -> JudgementRules:
        """These rules with ``values`` replacing keys of ``kind``'s block (the settings that
        win over every rules file), validated."""
        block = self.get(kind)
        blocks = dict(self.blocks)
        blocks[kind.name] = kind.config.model_validate({**block.model_dump(), **values})
        return JudgementRules(blocks)


def load_judgements(rules_dir: Path = RULES_DIR, teams: Iterable[Path] = ()) -> JudgementRules:
    """``rules/judgements.yaml`` with each of ``teams`` (a team's judgements.yaml files, in
    order) merged onto it; :class:`pydantic.ValidationError` when the result is not valid,
    ``ValueError`` when a file is not a mapping."""
    data = load_yaml(rules_dir / "judgements.yaml") or {}
    for path in teams:
        team = load_yaml(path) or {}
        if not isinstance(team, Mapping):
            raise ValueError(f"{path}: expected a mapping at the top level")
        data = merge_judgements(data, team)
    return JudgementRules.validate(data)


class Judges:
    """The enabled judges, built from ``rules`` and the playbook, asked in order."""

    def __init__(self, rules: JudgementRules, playbook: PlaybookRules) -> None:
        self.rules = rules
        self.judges: list[Judge] = [
            k.judge(rules.get(k), rules, playbook)
            for k in KINDS
            if k.judge is not None and rules.get(k).enabled
        ]
        # asked per line: only the judges that have something to say there (the base
        # class says nothing), in the same order
        self._line = [j for j in self.judges if _overrides(j, "line")]
        self._after = [j for j in self.judges if _overrides(j, "after")]

    def line(self, st: StreamState, seen: Seen) -> list[Judgement]:
        return [j for judge in self._line for j in judge.line(st, seen)]

    def after(self, st: StreamState, changes: Sequence[Change]) -> list[Judgement]:
        return [j for judge in self._after for j in judge.after(st, changes)]

    def tick(self, st: StreamState, now: float) -> list[Judgement]:
        return [j for judge in self.judges for j in judge.tick(st, now)]

    def restarted(self, inc: Incident) -> CrashLoop | None:
        return next((c for judge in self.judges if (c := judge.restarted(inc))), None)

    def evidence(self, inc: Incident, rules: Sequence[str]) -> CrashLoop | None:
        return next((c for judge in self.judges if (c := judge.evidence(inc, rules))), None)


def _overrides(judge: Judge, name: str) -> bool:
    """Whether ``judge`` answers ``name`` otherwise than :class:`Judge` (which says nothing)."""
    return getattr(type(judge), name) is not getattr(Judge, name) or name in getattr(
        judge, "__dict__", {}
    )
