"""Request and response models of on-call's writes and the audit record."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from service.incidents.codec import JsonObject


class AssignRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    assignee: str | None = Field(..., max_length=100, examples=["alice"])

    @field_validator("assignee")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is None:
            return None
        v = v.strip()
        if not v or not v.isprintable():
            raise ValueError("a name (or null for nobody)")
        return v


class NoteRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(..., min_length=1, max_length=4000)

    @field_validator("text")
    @classmethod
    def _text(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("the note is empty")
        return v.strip()


class AuditRecord(BaseModel):
    """One write someone made, never changed afterwards."""

    id: int
    at: float
    actor: str = Field(..., description="the authenticated user (``token``: api.token)")
    via: str = Field(..., description="user | token | read_token | proxy | slack | open")
    action: str = Field(
        ..., examples=["ack", "assign", "note", "resolve", "silence.create", "receiver.test"]
    )
    target_kind: str
    target_id: str
    detail: JsonObject


class TimelineItem(BaseModel):
    at: float
    by: str
    action: str
    detail: str | None = None
