"""Silences: matchers over incident labels (plus ``receiver``) and a time window; a
delivery due while a silence matches is recorded as ``silenced`` and not sent.

:func:`service.labels.pins_one_namespace` says whether matchers stay inside one namespace (a wider silence
needs an explicit cluster-wide choice); :func:`preview` lists what a silence would hide;
:func:`silencing` marks the incidents an active silence covers."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from service.incidents.incident_json import IncidentBody
from service.labels import matches
from service.notify.routing import incident_labels, view_labels
from service.store.views import IncidentView, SilenceView

PREVIEW_WINDOW_S = 86400.0  # "the last day's incidents"
PREVIEW_SCAN = 2000  # incidents read at most per list (newest first)


class SilenceSource(Protocol):
    def list_silences(self, active_only: bool = False) -> list[SilenceView]: ...


def silenced_by(
    silences: list[SilenceView], incident: IncidentBody, receiver: str, now: float
) -> SilenceView | None:
    labels = incident_labels(incident)
    labels["receiver"] = receiver
    for s in silences:
        if s["starts_at"] <= now < s["ends_at"] and matches(labels, s["matchers"]):
            return s
    return None


class IncidentSource(Protocol):
    def list_incidents(
        self,
        *,
        status: str | None = None,
        since: float | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> tuple[list[IncidentView], str | None]: ...


@dataclass(frozen=True, slots=True)
class SilencePreview:
    """What a silence would hide: open incidents and the last day's, and their namespaces
    (``""`` for incidents without one). ``truncated``: more incidents than were read."""

    open: list[IncidentView]
    recent: list[IncidentView]
    namespaces: list[str]
    truncated: bool


def preview(store: IncidentSource, matchers: dict[str, list[str]], now: float) -> SilencePreview:
    """The open incidents and those of the last day the matchers cover (``receiver``
    matchers are ignored: they choose receivers, not incidents)."""
    wanted = {k: v for k, v in matchers.items() if k != "receiver"}
    open_, cut_open = _scan(store, wanted, status="open", since=None)
    recent, cut_recent = _scan(store, wanted, status=None, since=now - PREVIEW_WINDOW_S)
    spaces = sorted({str(i.get("namespace") or "") for i in [*open_, *recent]})
    return SilencePreview(open_, recent, spaces, cut_open or cut_recent)


def _scan(
    store: IncidentSource, matchers: dict[str, list[str]], status: str | None, since: float | None
) -> tuple[list[IncidentView], bool]:
    out: list[IncidentView] = []
    cursor: str | None = None
    read = 0
    while True:
        page, cursor = store.list_incidents(status=status, since=since, limit=500, cursor=cursor)
        read += len(page)
        out.extend(i for i in page if matches(view_labels(i), matchers))
        if cursor is None:
            return out, False
        if read >= PREVIEW_SCAN:
            return out, True


def silencing(
    silences: Iterable[SilenceView], rows: Iterable[IncidentView], now: float
) -> dict[str, SilenceView]:
    """Incident id → the silence in force now that covers it (for any receiver)."""
    active = [s for s in silences if s["starts_at"] <= now < s["ends_at"]]
    out: dict[str, SilenceView] = {}
    for row in rows:
        labels = view_labels(row)
        for s in active:
            wanted = {k: v for k, v in s["matchers"].items() if k != "receiver"}
            if matches(labels, wanted):
                out[row["id"]] = s
                break
    return out


class SilenceCache:
    """Active silences, re-read from the store at most every ``ttl_s``."""

    def __init__(
        self, store: SilenceSource, clock: Callable[[], float] = time.time, ttl_s: float = 1.0
    ) -> None:
        self.store = store
        self.clock = clock
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._silences: list[SilenceView] = []
        self._read_at = float("-inf")

    def check(self, incident: IncidentBody, receiver: str) -> SilenceView | None:
        now = self.clock()
        with self._lock:
            if time.monotonic() - self._read_at >= self.ttl_s:
                # future ones too: the window is checked per delivery
                self._silences = [
                    s for s in self.store.list_silences(active_only=False) if s["ends_at"] > now
                ]
                self._read_at = time.monotonic()
            silences = self._silences
        return silenced_by(silences, incident, receiver, now)

    def invalidate(self) -> None:
        with self._lock:
            self._read_at = float("-inf")
