"""Silences: matchers over incident labels (plus ``receiver``) and a time window; a
delivery due while a silence matches is recorded as ``silenced`` and not sent."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from service.classify.incident_json import IncidentBody
from service.labels import matches
from service.notify.routing import incident_labels
from service.store.views import SilenceView


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
