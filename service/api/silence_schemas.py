"""Silences' request and response models: matchers checked against the taxonomy, a
window, the scope (one namespace or, said so, cluster-wide), edits and extensions."""

from __future__ import annotations

import time
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import cast

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from service import labels
from service.api.timespec import parse_duration, parse_instant
from service.taxonomy import CATEGORIES, STAGES, TIERS

MATCHER_KEYS = tuple(sorted(labels.FIELDS))
_MATCHER_VALUES: dict[str, tuple[str, ...]] = {
    "tier": TIERS,
    "category": CATEGORIES,
    "stage": STAGES,
    "severity": ("critical", "warning"),
    "status": ("open", "resolved"),
}


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---- silences ----------------------------------------------------------------------------
def validate_matchers(matchers: dict[str, list[str] | str]) -> dict[str, list[str]]:
    """The notifier's own normalisation (:func:`service.labels.validate`), plus:
    no empty values, and values of taxonomy fields must be known ids or globs that match one
    (a typo like ``oom_kvcache`` would otherwise silence nothing, silently)."""
    if not matchers:
        raise ValueError("at least one matcher is required (a silence must not mute everything)")
    out = labels.validate(matchers)
    for key, values in out.items():
        values = [v.strip() for v in values]
        if any(not v for v in values):
            raise ValueError(f"matcher {key!r}: values must be non-empty")
        allowed = _MATCHER_VALUES.get(key)
        if allowed:
            bad = [v for v in values if not any(fnmatchcase(a, v) for a in allowed)]
            if bad:
                raise ValueError(
                    f"matcher {key!r}: unknown value(s) {bad}; "
                    f"expected one of {list(allowed)} (globs allowed)"
                )
        out[key] = values
    return out


class SilenceRequest(_Strict):
    """Mute notifications for incidents matching every matcher (values of one key are ORed)
    until ``ends_at`` or for ``duration``; incidents are still recorded."""

    matchers: dict[str, list[str] | str] = Field(
        ...,
        examples=[{"namespace": ["llm-prod"], "category": ["oom_*"]}],
        description="field → values (exact or shell glob); fields: tier, category, stage, "
        "severity, status, namespace, pod, node, container, stream, incident, "
        "receiver, label:<pod label>",
    )
    ends_at: float | str | None = Field(None, description="epoch seconds or ISO 8601")
    duration: str | None = Field(None, examples=["2h"], description="e.g. 30m, 2h, 1d")
    starts_at: float | str | None = Field(None, description="default: now")
    comment: str = Field(..., min_length=1, max_length=2000, description="why it is silenced")
    incident: str | None = Field(
        None, max_length=64, description="made from this incident's page (its timeline says so)"
    )
    cluster_wide: bool = Field(
        False,
        description="must be true when the matchers do not pin one namespace (one exact "
        "namespace, stream or incident): the silence then mutes matching incidents in every "
        "namespace. POST /silences/preview shows what it would hide.",
    )

    @field_validator("matchers")
    @classmethod
    def _matchers(cls, v: dict[str, list[str] | str]) -> dict[str, list[str]]:
        return validate_matchers(v)

    @model_validator(mode="after")
    def _times(self) -> SilenceRequest:
        now = time.time()
        if (self.ends_at is None) == (self.duration is None):
            raise ValueError("give exactly one of ends_at or duration")
        starts = parse_instant(self.starts_at) if self.starts_at is not None else None
        if self.duration is not None:
            ends = (starts if starts is not None and starts > now else now) + parse_duration(
                self.duration
            )
        else:
            ends = parse_instant(self.ends_at)  # type: ignore[arg-type]
        if ends <= now:
            raise ValueError("ends_at must be in the future")
        if starts is not None and starts >= ends:
            raise ValueError("starts_at must be before ends_at")
        self.starts_at = starts
        self.ends_at = ends
        self.duration = None
        return self

    @model_validator(mode="after")
    def _scope(self) -> SilenceRequest:
        matchers = cast(dict[str, list[str]], self.matchers)
        if not self.cluster_wide and not labels.pins_one_namespace(matchers):
            raise ValueError(
                "these matchers reach incidents in every namespace: add one namespace "
                "(or stream / incident), or set cluster_wide to mute them cluster-wide "
                "(POST /silences/preview shows what it would hide)"
            )
        return self

    def resolved(self) -> NewSilence:
        """The silence in the store's terms, as validation left it: every matcher value a
        list, ``ends_at`` (and ``starts_at`` when given) epoch seconds."""
        return NewSilence(
            matchers=cast(dict[str, list[str]], self.matchers),
            ends_at=float(cast(float, self.ends_at)),
            starts_at=cast(float | None, self.starts_at),
            comment=self.comment,
            incident=self.incident,
        )


@dataclass(frozen=True, slots=True)
class NewSilence:
    """A validated :class:`SilenceRequest`: what :meth:`Store.create_silence` takes."""

    matchers: dict[str, list[str]]
    ends_at: float
    starts_at: float | None
    comment: str
    incident: str | None


class SilencePreviewRequest(_Strict):
    """Matchers of a silence not yet made (as in :class:`SilenceRequest`)."""

    matchers: dict[str, list[str] | str] = Field(..., examples=[{"category": ["oom_kv_cache"]}])

    @field_validator("matchers")
    @classmethod
    def _matchers(cls, v: dict[str, list[str] | str]) -> dict[str, list[str]]:
        return validate_matchers(v)


class PreviewItem(_Open):
    id: str
    stream: str
    namespace: str | None = None
    pod: str | None = None
    status: str
    tier: str
    category: str
    opened_at: float | None = None


class SilencePreviewOut(_Open):
    """What the silence would hide now: open incidents, the last day's incidents (up to
    100 of each listed, all counted), the namespaces they are in (``""``: none), and
    whether it needs ``cluster_wide`` (it does not pin one namespace)."""

    open_count: int
    recent_count: int
    open: list[PreviewItem]
    recent: list[PreviewItem]
    namespaces: list[str]
    cluster_wide: bool
    truncated: bool = Field(
        ..., description="more incidents than were read: counts are lower bounds"
    )


class Silence(_Open):
    id: str
    matchers: dict[str, list[str]]
    starts_at: float
    ends_at: float
    created_by: str | None = Field(None, description="the user who made it")
    comment: str | None = None
    created_at: float | None = None
    active: bool = Field(..., description="in force now")


class SilenceEdit(_Strict):
    """Change a silence in force: its comment, its end, its matchers (what is left out stays
    as it is). Matchers that reach beyond one namespace need ``cluster_wide`` again."""

    comment: str | None = Field(None, min_length=1, max_length=2000)
    ends_at: float | str | None = Field(None, description="epoch seconds or ISO 8601")
    matchers: dict[str, list[str] | str] | None = None
    cluster_wide: bool = False

    @field_validator("matchers")
    @classmethod
    def _matchers(cls, v: dict[str, list[str] | str] | None) -> dict[str, list[str]] | None:
        return None if v is None else validate_matchers(v)

    @model_validator(mode="after")
    def _checks(self) -> SilenceEdit:
        if self.ends_at is not None:
            self.ends_at = parse_instant(self.ends_at)
            if self.ends_at <= time.time():
                raise ValueError("ends_at must be in the future")
        if self.matchers is not None:
            matchers = cast(dict[str, list[str]], self.matchers)
            if not self.cluster_wide and not labels.pins_one_namespace(matchers):
                raise ValueError(
                    "these matchers reach incidents in every namespace: add one namespace "
                    "(or stream / incident), or set cluster_wide"
                )
        return self


class SilenceExtend(_Strict):
    """More time: ``duration`` after its end (or after now, if that is later)."""

    duration: str = Field(..., examples=["2h"], description="e.g. 30m, 2h, 1d")

    @field_validator("duration")
    @classmethod
    def _duration(cls, v: str) -> str:
        if parse_duration(v) <= 0:
            raise ValueError("the duration must be positive")
        return v

    @property
    def seconds(self) -> float:
        return parse_duration(self.duration)
