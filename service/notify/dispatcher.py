"""Background delivery: outbox events → per-receiver deliveries → HTTP, at least once.

The stages live apart; this module runs them on threads and owns the instance's identity:

* one thread expands new outbox events into deliveries (:func:`service.notify.outbox.expand`:
  routing, ``send_resolved``, the fleet hold of :mod:`service.notify.fleet_hold`) and does the
  housekeeping (pruning, store gauges);
* one thread per receiver runs its :class:`~service.notify.sender.Sender`: claim due groups
  under a lease, silence, inhibit, render, rate-limit, send, record, back off; for receivers
  that forget alerts (Alertmanager) it also re-posts the open ones.

Any number of dispatchers may share one database: a crashed instance's leases expire and
another takes over. At start the instance takes its identity lock (:meth:`Store.instance_lock`)
and releases what its previous run held, so a restart after kill -9 delivers them at once.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable

import httpx

from service import metrics
from service.config import FleetSettings, NotifySettings, ReceiverSettings
from service.notify.fleet_hold import FleetHold
from service.notify.outbox import expand, make_route
from service.notify.receivers import check
from service.notify.routing import Router
from service.notify.sender import Sender
from service.notify.silences import SilenceCache
from service.store import Store
from service.store.identity import InstanceLock

log = logging.getLogger("vllm_sentinel.notify")
IDENTITY_RETRY_S = 2.0  # how often an identity held by another process is tried again


class Dispatcher:
    def __init__(
        self,
        store: Store,
        receivers: list[ReceiverSettings],
        settings: NotifySettings | None = None,
        *,
        instance_id: str,
        clock: Callable[[], float] = time.time,
        poll_interval_s: float = 0.2,
        claim_batch: int = 5,
        housekeeping_s: float = 30.0,
        http: httpx.Client | None = None,
        rng: random.Random | None = None,
        fleet: FleetSettings | None = None,
        fleet_prone: frozenset[str] = frozenset(),
    ) -> None:
        check(receivers)
        self.store = store
        self.receivers = list(receivers)
        self.settings = settings or NotifySettings()
        self.instance_id = instance_id
        self.clock = clock
        self.poll_interval_s = poll_interval_s
        self.housekeeping_s = housekeeping_s
        self.router = Router(self.receivers)
        self.route = make_route(self.router)
        # None or enabled=False: every incident pages on its own, at once
        self.fleet = (
            FleetHold(fleet, store, self.router, instance_id, fleet_prone)
            if fleet is not None and fleet.enabled
            else None
        )
        self.silences = SilenceCache(store, clock)
        self.http = http or httpx.Client(follow_redirects=False)
        self._own_http = http is None
        self.rng = rng or random.Random()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self.senders = {
            r.name: Sender(
                r,
                store=store,
                instance_id=instance_id,
                settings=self.settings,
                clock=clock,
                http=self.http,
                rng=self.rng,
                silences=self.silences,
                fleet=self.fleet,
                claim_batch=claim_batch,
                stop=self._stop,
                wake=self.wake,
            )
            for r in self.receivers
        }
        self._kick = {r.name: threading.Event() for r in self.receivers}
        self._threads: list[threading.Thread] = []
        self._housekept = float("-inf")
        self._identity: InstanceLock | None = None  # once start() ran
        self._identity_tried = float("-inf")
        self._recovered = False  # leases of this instance's previous run released
        self._identity_warned = False

    # ---- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        self._stop.clear()
        self._identity = self.store.instance_lock(self.instance_id)
        self._recovered = False
        try:
            self._recover()
        except Exception:  # noqa: BLE001 - the outbox thread tries again
            log.warning("could not release the previous run's claims yet", exc_info=True)
        self._threads = [
            threading.Thread(target=self._expand_loop, name="notify-outbox", daemon=True)
        ]
        self._threads += [
            threading.Thread(
                target=self._send_loop, args=(r,), name=f"notify-{r.name}", daemon=True
            )
            for r in self.receivers
        ]
        for t in self._threads:
            t.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        for ev in self._kick.values():
            ev.set()
        for t in self._threads:
            t.join(timeout)
        joined = not any(t.is_alive() for t in self._threads)
        self._threads = []
        for r in self.receivers:
            ledger = self.senders[r.name].ledger
            try:
                ledger.pay()
            except Exception:  # noqa: BLE001 - left in doubt: re-sent with its key
                log.warning(
                    "receiver %s: could not record %d outcomes before stopping",
                    r.name,
                    len(ledger),
                    exc_info=True,
                )
        if self._identity is not None:
            # nothing of ours on the wire, and the id is still ours alone: give back
            if joined and self._recovered:
                try:
                    if self._identity.acquire():
                        self.store.release_claims(self.instance_id)
                except Exception:  # noqa: BLE001 - released at the next start instead
                    log.warning("could not release claims at stop", exc_info=True)
            self._identity.release()
            self._identity = None
        if self._own_http:
            self.http.close()

    def _recover(self) -> None:
        """Take this instance's identity lock and release the leases its previous run held
        (a restart after kill -9 delivers them now, not when they expire). Tried again every
        ``IDENTITY_RETRY_S`` while another live process holds the lock (it then keeps its
        claims; ours are the same id, so nothing is released)."""
        if self._recovered or self._identity is None:
            return
        if time.monotonic() - self._identity_tried < IDENTITY_RETRY_S:
            return
        self._identity_tried = time.monotonic()
        if not self._identity.acquire():
            log.log(
                logging.DEBUG if self._identity_warned else logging.WARNING,
                "instance id %s is in use by another live process; its delivery claims "
                "are left to it (set a distinct instance_id per replica)",
                self.instance_id,
            )
            self._identity_warned = True
            return
        released, doubt = self.store.release_claims(self.instance_id)
        self._recovered = True
        if released:
            log.warning(
                "released %d delivery claims of this instance's previous run; %d "
                "were on the wire when it stopped and are sent again with the same "
                "Idempotency-Key",
                released,
                doubt,
            )
            for ev in self._kick.values():
                ev.set()

    def wake(self) -> None:
        """New outbox events were committed (in-process hint; polling covers the rest)."""
        self._wake.set()

    def status(self) -> dict[str, object]:
        """For health endpoints: threads alive, receivers failing, tokens left."""
        alive = {t.name: t.is_alive() for t in self._threads}
        return {
            "instance_id": self.instance_id,
            "identity_held": bool(self._identity is not None and self._identity.held),
            "running": bool(alive) and all(alive.values()) and not self._stop.is_set(),
            "receivers": {
                name: {"failing": s.failing, "tokens": s.bucket.available()}
                for name, s in self.senders.items()
            },
        }

    def run_once(self) -> int:
        """Expand and send whatever is due now, on the calling thread; messages sent."""
        self.expand()
        return sum(s.drain(block=False) for s in self.senders.values())

    # ---- the outbox thread -----------------------------------------------------------
    def expand(self) -> int:
        """Outbox events expanded into deliveries now."""
        hold = self.fleet.hold if self.fleet else None
        return expand(self.store, self.route, hold, self._stop)

    def _expand_loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._recover()
                if self.expand():
                    for ev in self._kick.values():
                        ev.set()
                self._housekeeping()
            except Exception:
                log.exception("outbox expansion failed; retrying")
                self._heal()
                self._stop.wait(1.0)
            self._wake.wait(self.poll_interval_s)
            self._wake.clear()

    def _housekeeping(self) -> None:
        if time.monotonic() - self._housekept < self.housekeeping_s:
            return
        self._housekept = time.monotonic()
        if self._identity is not None and self._recovered:
            self._identity.acquire()  # re-taken if a database outage dropped it
        self.store.prune()
        metrics.refresh_store_gauges(self.store, [r.name for r in self.receivers])

    def _heal(self) -> None:
        """After a failure: a database that came back empty gets its schema again."""
        try:
            self.store.ensure_schema()
        except Exception:  # noqa: BLE001 - still down, or damaged: readiness reports it
            log.debug("schema check failed", exc_info=True)

    # ---- the receivers' threads ------------------------------------------------------
    def _send_loop(self, r: ReceiverSettings) -> None:
        sender = self.senders[r.name]
        kick = self._kick[r.name]
        while not self._stop.is_set():
            try:
                sender.drain()
                sender.resend()
            except Exception:
                log.exception("receiver %s: delivery pass failed; retrying", r.name)
                self._stop.wait(1.0)
            kick.wait(self.poll_interval_s)
            kick.clear()
