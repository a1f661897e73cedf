"""One receiver's delivery outcomes that the store could not take yet.

An outcome (``sent``, ``pending`` with a retry time, ``silenced`` ...) is recorded with
:meth:`Store.finish_deliveries`. When the database fails at that moment the outcome is
kept here and the error raised; :meth:`Ledger.pay` records what is owed, in order, before
the receiver claims anything else. So a 2xx answer received during a database outage is
recorded as ``sent`` once the database is back (the message never goes out again), and a
claim a failure interrupted is given back instead of waiting for its lease to expire.

Only the receiver's own thread touches its ledger (and :meth:`Dispatcher.stop` once that
thread has ended).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from service.store import Store

log = logging.getLogger("vllm_sentinel.notify")


@dataclass(slots=True)
class Outcome:
    """What to record for a group of deliveries (:meth:`Store.finish_deliveries`)."""

    ids: list[int]
    status: str  # sent | pending | silenced | inhibited | dropped
    note: str | None = None
    retry_at: float | None = None  # pending: not claimed again before
    in_doubt: bool = False  # pending: the receiver may have had the request already


class Ledger:
    def __init__(self, store: Store, instance_id: str, receiver: str) -> None:
        self.store = store
        self.instance_id = instance_id
        self.receiver = receiver
        self.owed: list[Outcome] = []

    def __len__(self) -> int:
        return len(self.owed)

    def owe(self, outcome: Outcome) -> None:
        """Keep ``outcome`` for :meth:`pay` (the caller is about to raise)."""
        self.owed.append(outcome)

    def record(self, outcome: Outcome) -> int:
        """Record ``outcome`` (rows still leased to this instance); when the database fails,
        keep it and raise."""
        try:
            return self._finish(outcome)
        except Exception:
            self.owe(outcome)
            if outcome.status == "sent":
                log.warning(
                    "receiver %s: accepted %d deliveries but the store is "
                    "unreachable; recording them when it is back (not sent again)",
                    self.receiver,
                    len(outcome.ids),
                )
            raise

    def pay(self) -> None:
        """Record what is owed, oldest first; raises (keeping the rest) while the database
        still fails."""
        while self.owed:
            o = self.owed[0]
            self._finish(o)
            self.owed.pop(0)
            if o.status == "sent":
                log.info(
                    "receiver %s: recorded %d deliveries accepted during a store outage",
                    self.receiver,
                    len(o.ids),
                )

    def _finish(self, o: Outcome) -> int:
        return self.store.finish_deliveries(
            o.ids,
            self.instance_id,
            status=o.status,
            note=o.note,
            retry_at=o.retry_at,
            in_doubt=o.in_doubt,
        )
