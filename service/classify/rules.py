"""Load and validate the rule data under ``rules/`` (signatures, stages, facts, playbook,
benign lines and exceptions, judgements).

Rules are data: operators add a signature without a release. Every file is validated with
pydantic on load so a typo fails loudly at start-up, not silently at 3 a.m. A team's
``judgements.yaml`` is merged onto the shipped one key by key (:func:`merge_judgements`;
each block is validated by its judgement: :mod:`.judgements.registry`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from service.shipped import shipped_dir
from service.taxonomy import CATEGORY_TIER, STAGES

RULES_DIR = shipped_dir("rules")  # the top-level rules/, installed as vllm_sentinel_data.rules

Role = Literal["cause", "symptom", "cascade", "warning"]


E = TypeVar("E")


class Examples(BaseModel, Generic[E]):
    """A rule's own tests: lines it must match (of type ``E``), lines it must not."""

    model_config = ConfigDict(extra="forbid")
    match: list[E] = Field(min_length=1)
    no_match: list[str] = Field(min_length=1)


class Signature(BaseModel):
    """One failure signature, readable by an on-call engineer."""

    model_config = ConfigDict(extra="forbid")

    id: str
    category: str
    pattern: str
    description: str
    remediation: str = ""
    role: Role = "cause"
    priority: int = 50  # higher wins when several findings compete for root cause
    confidence: float = 0.95
    stage: str | None = None  # the rung this failure belongs to by nature
    default_stage: str | None = None  # used only when nothing tells the stage
    min_stage: str | None = None  # the earliest stage this failure can happen in
    implies_stage: str | None = None  # a cascade that shows where the root cause happened
    category_by_stage: dict[str, str] = Field(default_factory=dict)
    literals: list[str] | None = None  # prefilter; derived from the pattern when absent
    case_sensitive: bool = False
    levels: list[str] | None = None  # match only lines of these levels (or with no level)
    quiet_on: list[str] = Field(
        default_factory=list
    )  # platforms (the `platform` fact) where it is noise
    # Whether the line alone is a failure that pages at once (True), or a finding that pages
    # only once the stream shows a failure outcome (False: a fallback, a probe); None: by the
    # line (docs/taxonomy.md "Which findings page at once": an exception line, an error-level
    # or unlevelled line is fatal; a library's INFO / WARN line waits for an outcome).
    fatal: bool | None = None
    examples: Examples[str]

    @field_validator("category")
    @classmethod
    def _known_category(cls, v: str) -> str:
        if v not in CATEGORY_TIER:
            raise ValueError(f"unknown category {v!r}")
        return v

    @field_validator("stage", "default_stage", "min_stage", "implies_stage")
    @classmethod
    def _known_stage(cls, v: str | None) -> str | None:
        if v is not None and v not in STAGES:
            raise ValueError(f"unknown stage {v!r}")
        return v

    @model_validator(mode="after")
    def _by_stage_ids(self) -> Signature:
        for stage, cat in self.category_by_stage.items():
            if stage not in STAGES or cat not in CATEGORY_TIER:
                raise ValueError(f"{self.id}: bad category_by_stage entry {stage}: {cat}")
        return self

    @property
    def tier(self) -> str:
        return CATEGORY_TIER[self.category]


class StagePattern(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pattern: str
    example: str


class StageRules(BaseModel):
    """``rules/stages.yaml``: families of patterns per stage and per status change."""

    model_config = ConfigDict(extra="forbid")
    stages: dict[str, list[StagePattern]]
    ready: list[StagePattern]
    serving: list[StagePattern]
    run_start: list[StagePattern]
    shutdown: list[StagePattern]
    default_stage: dict[str, str] = Field(default_factory=dict)  # category → stage
    files: dict[str, list[str]] = Field(default_factory=dict)  # logger file name → stage
    evidence: dict[str, list[StagePattern]] = Field(default_factory=dict)  # failing line → stage

    @model_validator(mode="after")
    def _stage_ids(self) -> StageRules:
        for s in (
            list(self.stages)
            + list(self.default_stage.values())
            + list(self.files)
            + list(self.evidence)
        ):
            if s not in STAGES:
                raise ValueError(f"unknown stage {s!r} in stages.yaml")
        return self


BenignPattern = StagePattern  # a benign line's pattern and example (rules/benign.yaml)


class FactPattern(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pattern: str  # first capture group (or named group ``value``) is the value
    example: str
    expect: str


class FactRules(BaseModel):
    model_config = ConfigDict(extra="forbid")
    facts: dict[str, list[FactPattern]]


# libyaml's safe loader when PyYAML has it: the same data as yaml.safe_load, ~10x faster (every
# RuleBook reads all of rules/)
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(path: Path) -> Any:
    with path.open(encoding="utf-8") as fh:
        return yaml.load(fh, Loader=_SafeLoader)


def load_signatures(rules_dir: Path = RULES_DIR) -> list[Signature]:
    """All signatures of ``rules/signatures/*.yaml``; ids must be unique."""
    sigs: list[Signature] = []
    for path in sorted((rules_dir / "signatures").glob("*.yaml")):
        data = load_yaml(path) or {}
        for raw in data.get("signatures", []):
            try:
                sigs.append(Signature.model_validate(raw))
            except Exception as exc:  # noqa: BLE001 - re-raised with the file name
                raise ValueError(f"{path.name}: {exc}") from exc
    ids = [s.id for s in sigs]
    dupes = {i for i in ids if ids.count(i) > 1}
    if dupes:
        raise ValueError(f"duplicate signature ids: {sorted(dupes)}")
    return sigs


class FrameEntry(BaseModel):
    """One function of the frame map (``rules/frames.yaml``): the rung its frame hints."""

    model_config = ConfigDict(extra="forbid")

    func: str
    stage: str
    programs: list[str]
    versions: str  # the read releases that define it
    within: list[str] = Field(default_factory=list)  # path fragments a generic name needs
    note: str = ""
    example: str  # a real frame line
    example_from: str  # the repository file it is from, or "<program> <version> source"

    @field_validator("stage")
    @classmethod
    def _known_stage(cls, v: str) -> str:
        if v not in STAGES:
            raise ValueError(f"unknown stage {v!r} in frames.yaml")
        return v


class Wrapper(BaseModel):
    """A function that only carries a deeper start-up step: never a hint."""

    model_config = ConfigDict(extra="forbid")

    func: str
    versions: str
    note: str = ""


class Raised(BaseModel):
    """A message only mapped functions raise: the line places itself like their frames."""

    model_config = ConfigDict(extra="forbid")

    pattern: str
    stage: str
    raised_in: list[str]
    versions: str
    example: str
    example_from: str

    @field_validator("stage")
    @classmethod
    def _known_stage(cls, v: str) -> str:
        if v not in STAGES:
            raise ValueError(f"unknown stage {v!r} in frames.yaml")
        return v


class FrameRules(BaseModel):
    """``rules/frames.yaml``: the frame map, the engines' own paths, the wrappers, the
    messages that place themselves."""

    model_config = ConfigDict(extra="forbid")

    engine_paths: str  # a frame whose path matches is the engine's own code
    frames: list[FrameEntry]
    wrappers: list[Wrapper]
    raised: list[Raised] = Field(default_factory=list)

    @model_validator(mode="after")
    def _wrappers_hint_nothing(self) -> FrameRules:
        both = {f.func for f in self.frames} & {w.func for w in self.wrappers}
        if both:
            raise ValueError(f"frames.yaml: wrappers cannot hint a stage: {sorted(both)}")
        return self


def load_frame_rules(rules_dir: Path = RULES_DIR) -> FrameRules:
    return FrameRules.model_validate(load_yaml(rules_dir / "frames.yaml"))


def load_stage_rules(rules_dir: Path = RULES_DIR) -> StageRules:
    return StageRules.model_validate(load_yaml(rules_dir / "stages.yaml"))


def load_fact_rules(rules_dir: Path = RULES_DIR) -> FactRules:
    return FactRules.model_validate(load_yaml(rules_dir / "facts.yaml"))


# ``rules/playbook.yaml`` as read (categories, warnings, restarts, common_evidence): rules
# data a team may extend, read defensively (a missing entry is no advice; see
# :mod:`service.classify.judgements.playbook`)
PlaybookRules = dict[str, Any]


def load_playbook(rules_dir: Path = RULES_DIR) -> PlaybookRules:
    """``rules/playbook.yaml``: first move, owner and evidence per category."""
    data = load_yaml(rules_dir / "playbook.yaml") or {}
    unknown = set(data.get("categories", {})) - set(CATEGORY_TIER)
    if unknown:
        raise ValueError(f"playbook.yaml: unknown categories {sorted(unknown)}")
    return data


def load_benign(rules_dir: Path = RULES_DIR) -> list[BenignPattern]:
    """``rules/benign.yaml``: error-looking lines that are not server failures."""
    data = load_yaml(rules_dir / "benign.yaml") or {}
    return [BenignPattern.model_validate(b) for b in data.get("benign", [])]


def load_benign_exceptions(rules_dir: Path = RULES_DIR) -> frozenset[str]:
    """``rules/benign.yaml`` ``exceptions``: exception names that are not failures."""
    data = load_yaml(rules_dir / "benign.yaml") or {}
    return frozenset(str(e) for e in data.get("exceptions") or [])


def merge_judgements(base: Mapping[str, Any], team: Mapping[str, Any]) -> dict[str, Any]:
    """``team``'s keys over ``base``'s: mappings merged key by key, anything else replaced."""
    out = dict(base)
    for key, value in team.items():
        old = out.get(key)
        if isinstance(old, Mapping) and isinstance(value, Mapping):
            out[key] = merge_judgements(old, value)
        else:
            out[key] = value
    return out
