"""``Store``: durable incidents, stream snapshots, positions, outbox and deliveries behind one
small API (SQLite or PostgreSQL, chosen by URL)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Unpack

from service.incidents.incident_json import IncidentBody
from service.incidents.snapshots import NoveltySnapshot, StreamSnapshot
from service.incidents.workload import WorkloadSnapshot
from service.metrics import StoreGauges
from service.store import deliveries, fleets, observe, queries, retention, writes
from service.store.deliveries import Claim, Hold, Route
from service.store.effects import BatchEffects
from service.store.identity import InstanceLock
from service.store.people_store import PeopleStore
from service.store.queries import IncidentFilters
from service.store.views import (
    FleetMember,
    IncidentView,
    QuarantineRow,
    StoreStats,
    StreamView,
)

log = logging.getLogger("vllm_sentinel.store")


class Store(PeopleStore):
    """Thread-safe; every method is one short transaction (see :class:`StoreBase`)."""

    # ---- pipeline --------------------------------------------------------------------
    def load_stream(self, key: str) -> StreamSnapshot | None:
        with self._read() as conn:
            return queries.load_stream(conn, key)

    def load_stream_versioned(self, key: str) -> tuple[StreamSnapshot | None, int | None]:
        """The snapshot and its version (pass it back in ``BatchEffects.stream_versions``)."""
        with self._read() as conn:
            return queries.load_stream_versioned(conn, key)

    def load_workload_versioned(self, key: str) -> tuple[WorkloadSnapshot | None, int | None]:
        """A workload's saved state and its version (``BatchEffects.workload_versions``)."""
        with self._read() as conn:
            return queries.load_workload_versioned(conn, key)

    def load_novelty(self) -> NoveltySnapshot | None:
        """The novelty miner's saved templates, or None."""
        with self._read() as conn:
            return queries.load_novelty(conn, writes.NOVELTY)

    def applied_position(self, source: str, partition: str) -> int | None:
        with self._read() as conn:
            return queries.applied_position(conn, source, partition)

    def chunk_seen(self, chunk_id: str) -> bool:
        with self._read() as conn:
            return queries.chunk_seen(conn, chunk_id)

    def commit_batch(self, effects: BatchEffects) -> None:
        """One transaction: chunk id, positions (compare-and-set), stream and workload
        snapshots (compare-and-set), the novelty templates, incidents (version bumps),
        outbox events. Raises ``DuplicateChunk`` / ``StaleBatch`` (nothing written) when the
        batch was applied already."""
        if not effects.at:
            effects.at = self.clock()
        effects.skipped_incidents.clear()
        with self._write() as conn:
            writes.commit_batch(conn, effects)
            resolved = [
                w.body["id"]
                for w in effects.incidents
                if w.body.get("status") == "resolved"
                and w.body["id"] not in effects.skipped_incidents
            ]
            if resolved:  # a fleet whose last open member this was resolves with it
                fleets.resolve_finished(conn, resolved, effects.at)

    def prune(self, chunks_older_than_s: float = 86_400.0) -> int:
        """Forget forward chunk ids older than ``chunks_older_than_s``, and (at most every
        ``retention_interval_s``) incidents and streams past their retention. Rows
        deleted."""
        with self._write() as conn:
            n = writes.prune_chunks(conn, self.clock() - chunks_older_than_s)
        if (
            self.incident_retention_days > 0 or self.stream_retention_days > 0
        ) and time.monotonic() - self._retained_at >= self.retention_interval_s:
            self._retained_at = time.monotonic()
            n += sum(self.prune_retention().values())
        return n

    def prune_retention(
        self,
        *,
        incident_days: float | None = None,
        stream_days: float | None = None,
        max_batches: int = 20,
    ) -> dict[str, int]:
        """Delete resolved incidents, and idle streams and workloads past their retention (the
        settings, unless given; 0 keeps forever), ``retention.BATCH`` rows per transaction,
        at most ``max_batches`` transactions of each. Returns rows deleted by kind."""
        days = {
            "incidents": self.incident_retention_days if incident_days is None else incident_days,
            "streams": self.stream_retention_days if stream_days is None else stream_days,
        }
        out = retention.prune(self._write, self.clock(), days, max_batches)
        if any(out.values()):
            log.info(
                "store: retention removed %d incidents, %d streams and %d workloads",
                out["incidents"],
                out["streams"],
                out["workloads"],
            )
        return out

    # ---- incidents and streams -------------------------------------------------------
    def list_incidents(
        self,
        *,
        since: float | None = None,
        limit: int = 50,
        cursor: str | None = None,
        **filters: Unpack[IncidentFilters],
    ) -> tuple[list[IncidentView], str | None]:
        """Newest first; pass the returned cursor back for the next page (None: last page).
        ``fleet_id`` keeps the members of that fleet incident. ValueError for a malformed
        cursor."""
        with self._read() as conn:
            return queries.list_incidents(conn, filters, since, limit, cursor)

    def stream(self, key: str) -> StreamView | None:
        with self._read() as conn:
            return queries.stream(conn, key)

    def stats(self) -> StoreStats:
        with self._read() as conn:
            return queries.stats(conn)

    def count_open(self) -> int:
        with self._read() as conn:
            return queries.count_open(conn)

    def gauges(self) -> StoreGauges:
        """Open incidents by (tier, category), pending deliveries and outbox backlog (see
        :func:`observe.gauges`)."""
        with self._read() as conn:
            return observe.gauges(conn, self.clock())

    def open_told(self, receiver: str) -> list[IncidentBody]:
        """Open incidents ``receiver`` was sent a message about (re-posting alerts)."""
        with self._read() as conn:
            return observe.open_told(conn, receiver)

    def incidents_by_id(self, ids: list[str]) -> list[IncidentBody]:
        with self._read() as conn:
            return observe.incidents_by_id(conn, ids)

    def list_quarantine(self, limit: int = 100) -> list[QuarantineRow]:
        with self._read() as conn:
            return queries.list_quarantine(conn, limit)

    # ---- dispatcher ------------------------------------------------------------------
    def expand_outbox(self, route: Route, limit: int = 200, hold: Hold | None = None) -> int:
        with self._write() as conn:
            return deliveries.expand_outbox(conn, route, self.clock(), limit, hold)

    def claim_deliveries(
        self, receiver: str, instance: str, *, lease_s: float, group_wait_s: float, limit: int = 10
    ) -> list[Claim]:
        with self._write() as conn:
            return deliveries.claim(
                conn, receiver, instance, self.clock(), lease_s, group_wait_s, limit
            )

    def mark_sending(self, ids: list[int], instance: str) -> int:
        """The request for ``ids`` goes out now (see :func:`deliveries.mark_sending`);
        rows still leased to ``instance`` (fewer than ``ids``: do not send)."""
        with self._write() as conn:
            return deliveries.mark_sending(conn, ids, instance, self.clock())

    def finish_deliveries(
        self,
        ids: list[int],
        instance: str,
        *,
        status: str,
        note: str | None = None,
        retry_at: float | None = None,
        in_doubt: bool = False,
    ) -> int:
        with self._write() as conn:
            return deliveries.finish(
                conn,
                ids,
                instance,
                status=status,
                now=self.clock(),
                note=note,
                retry_at=retry_at,
                in_doubt=in_doubt,
            )

    def release_claims(self, instance: str) -> tuple[int, int]:
        """Give back every lease ``instance`` holds: (released, in doubt). Only for an
        instance that holds its :meth:`instance_lock` (no other live process uses the id)."""
        with self._write() as conn:
            return deliveries.release_own(conn, instance)

    def instance_lock(self, instance: str) -> InstanceLock:
        """An (unacquired) lock proving no other live process uses ``instance``."""
        return InstanceLock(self.engine, instance)

    def expedite_deliveries(self, receiver: str) -> int:
        """Deliveries backing off for ``receiver`` become due now (it is reachable again)."""
        with self._write() as conn:
            return deliveries.expedite(conn, receiver, self.clock())

    # ---- fleets ----------------------------------------------------------------------
    def inhibit_for_fleet(
        self,
        incident_id: str,
        delivery_ids: list[int],
        instance: str,
        *,
        threshold: int,
        window_s: float,
        covers: Callable[[IncidentBody], bool],
        prone: frozenset[str],
    ) -> str | None:
        """One transaction: find (or create, once across instances) the open fleet incident
        ``incident_id`` belongs to; when there is one and ``covers(fleet body)`` (the
        receiver gets the fleet's page), finish this instance's ``delivery_ids`` as
        ``inhibited`` (note: the fleet id). Returns that fleet id, else None (send as
        usual). A fleet found is committed either way."""
        with self._write() as conn:
            return fleets.inhibit(
                conn,
                incident_id,
                delivery_ids,
                instance,
                fleets.Inhibit(threshold, window_s, covers, prone),
                self.clock,
            )

    def fleet_members(self, fleet_id: str) -> list[FleetMember]:
        with self._read() as conn:
            return fleets.members(conn, fleet_id)
