"""The part of :class:`~service.store.Store` people write through: resolving, acknowledging,
assigning and noting incidents, silences, feedback; every write recorded with its actor in
the append-only audit table (:mod:`service.store.people`), in the same transaction."""

from __future__ import annotations

from service.incidents.codec import JsonObject
from service.store import annotations as notes
from service.store import fleets, people, queries, writes
from service.store.base import StoreBase
from service.store.people import SENTINEL, Who
from service.store.views import (
    AuditEntry,
    FeedbackReview,
    FeedbackView,
    IncidentDetail,
    SilenceView,
)


class PeopleStore(StoreBase):
    # ---- incidents -------------------------------------------------------------------
    def get_incident(self, id: str) -> IncidentDetail | None:  # noqa: A002 - API name
        with self._read() as conn:
            return queries.get_incident(conn, id)

    def resolve_incident(
        self,
        id: str,  # noqa: A002
        reason: str,
        at: float,
        by: Who = SENTINEL,
    ) -> IncidentDetail | None:
        """Resolve by hand (enqueues the ``resolved`` notification once); None: unknown id."""
        with self._write() as conn:
            done = writes.resolve_incident(conn, id, reason, at, by=by.name)
            if done is None:
                return None
            if done:
                people.record(conn, by, "resolve", "incident", id, at, {"reason": reason})
            fleets.resolve_finished(conn, [id], at)
        return self.get_incident(id)

    def acknowledge(self, id: str, by: Who) -> IncidentDetail | None:  # noqa: A002
        """``by`` is on it (PagerDuty stops escalating; receivers that paged are told once).
        Acknowledging again changes nothing. None: unknown id."""
        with self._write() as conn:
            if people.acknowledge(conn, id, by, self.clock()) is None:
                return None
        return self.get_incident(id)

    def assign(self, id: str, assignee: str | None, by: Who) -> IncidentDetail | None:  # noqa: A002
        with self._write() as conn:
            if people.assign(conn, id, assignee, by, self.clock()) is None:
                return None
        return self.get_incident(id)

    def add_note(self, id: str, text: str, by: Who) -> IncidentDetail | None:  # noqa: A002
        with self._write() as conn:
            if people.note(conn, id, text, by, self.clock()) is None:
                return None
        return self.get_incident(id)

    def record_action(
        self, by: Who, action: str, target_kind: str, target_id: str, detail: JsonObject
    ) -> None:
        """Append an audit row for a write that changes nothing stored (a test notification
        sent to a receiver)."""
        with self._write() as conn:
            people.record(conn, by, action, target_kind, target_id, self.clock(), detail)

    def audit(
        self,
        *,
        target_kind: str | None = None,
        target_id: str | None = None,
        actor: str | None = None,
        before_id: int | None = None,
        limit: int = 100,
    ) -> list[AuditEntry]:
        """Who did what, newest first."""
        with self._read() as conn:
            return people.entries(
                conn,
                target_kind=target_kind,
                target_id=target_id,
                actor=actor,
                before_id=before_id,
                limit=limit,
            )

    # ---- silences and feedback -------------------------------------------------------
    def create_silence(
        self,
        matchers: dict[str, list[str]],
        ends_at: float,
        by: Who,
        comment: str,
        starts_at: float | None = None,
        incident_id: str | None = None,
    ) -> SilenceView:
        """ValueError for unknown matcher fields, empty matchers or an empty window.
        ``incident_id``: made from that incident's page (its timeline says so)."""
        now = self.clock()
        with self._write() as conn:
            silence = notes.create_silence(
                conn,
                matchers,
                now if starts_at is None else starts_at,
                ends_at,
                by.name,
                comment,
                now,
            )
            detail = {"matchers": matchers, "ends_at": ends_at, "comment": comment}
            people.record(conn, by, "silence.create", "silence", silence["id"], now, detail)
            if incident_id is not None:
                people.record(
                    conn,
                    by,
                    "silence.create",
                    "incident",
                    incident_id,
                    now,
                    {**detail, "silence": silence["id"]},
                )
            return silence

    def get_silence(self, id: str) -> SilenceView | None:  # noqa: A002
        with self._read() as conn:
            return notes.get_silence(conn, id, self.clock())

    def edit_silence(
        self,
        id: str,  # noqa: A002
        by: Who,
        *,
        comment: str | None = None,
        ends_at: float | None = None,
        matchers: dict[str, list[str]] | None = None,
    ) -> SilenceView | None:
        """Change a silence's comment, end or matchers (an ended one cannot come back: make a
        new one). None: unknown or ended; ValueError for a bad change."""
        now = self.clock()
        with self._write() as conn:
            before = notes.get_silence(conn, id, now)
            if before is None or before["ends_at"] <= now:
                return None
            after = notes.edit_silence(
                conn, id, now, comment=comment, ends_at=ends_at, matchers=matchers
            )
            changed = {
                k: {"from": before[k], "to": after[k]}
                for k in ("comment", "ends_at", "matchers")
                if before[k] != after[k]
            }
            people.record(conn, by, "silence.edit", "silence", id, now, {"changed": changed})
            return after

    def extend_silence(self, id: str, seconds: float, by: Who) -> SilenceView | None:  # noqa: A002
        """``seconds`` more (from its end, or from now if that is later). None: unknown or
        ended."""
        now = self.clock()
        with self._write() as conn:
            before = notes.get_silence(conn, id, now)
            if before is None or before["ends_at"] <= now:
                return None
            ends = max(before["ends_at"], now) + seconds
            after = notes.edit_silence(conn, id, now, ends_at=ends)
            people.record(
                conn,
                by,
                "silence.extend",
                "silence",
                id,
                now,
                {"from": before["ends_at"], "to": ends},
            )
            return after

    def delete_silence(self, id: str, by: Who = SENTINEL) -> bool:  # noqa: A002
        """Expire a silence now (its record stays). False: unknown or ended already."""
        now = self.clock()
        with self._write() as conn:
            if not notes.expire_silence(conn, id, now):
                return False
            people.record(conn, by, "silence.expire", "silence", id, now)
            return True

    def list_silences(self, active_only: bool = False) -> list[SilenceView]:
        with self._read() as conn:
            return notes.list_silences(conn, self.clock(), active_only)

    def add_feedback(
        self,
        incident_id: str,
        correct: bool,
        category: str | None,
        comment: str | None,
        by: Who = SENTINEL,
    ) -> FeedbackView | None:
        now = self.clock()
        with self._write() as conn:
            fb = notes.add_feedback(conn, incident_id, correct, category, comment, now)
            if fb is not None:
                detail: JsonObject = {"correct": correct, "category": category, "comment": comment}
                people.record(conn, by, "feedback", "incident", incident_id, now, detail)
            return fb

    def list_feedback(self) -> list[FeedbackReview]:
        with self._read() as conn:
            return notes.list_feedback(conn)
