"""Background delivery: outbox events → per-receiver deliveries → HTTP, at least once.

One thread expands new outbox events (routing); one thread per receiver claims due
(incident, receiver) groups from the store under a lease, applies silences, waits for its
rate limit, renders the incident's current state once for the whole group and sends it.
Failures are retried with exponential backoff and full jitter (forever unless
``max_attempts``); a crashed instance's leases expire and another instance takes over.
Any number of dispatchers may share one database.

No message twice (see :mod:`service.store.deliveries`): a delivery is marked as going out
before its request is sent; a 2xx answer is recorded as ``sent`` and, if the database is
unreachable at that moment, kept in memory and recorded as soon as it is back — before
anything else is claimed — so a database outage never makes a message go out again. Any
other bookkeeping a failure interrupted (giving a claim back, a retry time) is replayed the
same way, so claims are not left to expire. At start the instance takes its identity lock
and releases what its previous run held. What a process that died with a request on the
wire leaves is sent again with the same ``Idempotency-Key`` (and ``X-Sentinel-Redelivery:
true``): the receiver may have it (PagerDuty deduplicates on ``dedup_key``; a webhook
receiver should on the key).

Silences mute what a receiver would be told, never a resolution: a receiver that was told
an incident opened (a PagerDuty alert is open) hears that it resolved, silenced or not.

Fleets (``FleetSettings``): the first message about a critical incident of a fleet-prone
category waits ``hold_s`` after the incident was stored (set when the delivery row is
created; not an attempt). When it is due, the store looks for the fleet it belongs to
(:meth:`Store.inhibit_for_fleet`): ``threshold`` or more workloads/nodes of that category
opened within ``window_s`` of it sharing a driver branch, image, node pool, NCCL version or
namespace. If there is one, the fleet incident is committed once (with its own outbox event:
it pages like any incident, through routes and silences) and this delivery ends
``inhibited``; so do the member's later messages to a receiver never told about it, while
the fleet is open. Otherwise the incident pages on its own.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from service import metrics
from service.classify.fleet import FLEET_PRONE, is_fleet
from service.config import FleetSettings, NotifySettings, ReceiverSettings
from service.notify.alert import Alert
from service.notify.outbox import NOTE_NEVER_SENT, backoff, make_route, message_kind
from service.notify.ratelimit import TokenBucket
from service.notify.receivers import builder, check, resender
from service.notify.routing import Router
from service.notify.silences import SilenceCache
from service.store import Claim, Store

log = logging.getLogger("vllm_sentinel.notify")
EXPAND_BATCH = 200
IDENTITY_RETRY_S = 2.0  # how often an identity held by another process is tried again
# errors after which the receiver may have the request (vs. refused before it was sent)
AMBIGUOUS = (httpx.TimeoutException, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
AMBIGUOUS_NOT = (httpx.ConnectTimeout, httpx.PoolTimeout)


@dataclass(slots=True)
class _Owed:
    """Bookkeeping a database failure interrupted, replayed before anything new."""

    ids: list[int]
    status: str
    kwargs: dict[str, Any] = field(default_factory=dict)


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
    ) -> None:
        check(receivers)
        self.store = store
        self.receivers = list(receivers)
        self.settings = settings or NotifySettings()
        # None or enabled=False: every incident pages on its own, at once
        self.fleet = fleet if fleet is not None and fleet.enabled else None
        self.instance_id = instance_id
        self.clock = clock
        self.poll_interval_s = poll_interval_s
        self.claim_batch = claim_batch
        self.housekeeping_s = housekeeping_s
        self.router = Router(self.receivers)
        self.route = make_route(self.router)
        self.silences = SilenceCache(store, clock)
        self.buckets = {r.name: TokenBucket(r.rate_limit_per_minute) for r in self.receivers}
        self.http = http or httpx.Client(follow_redirects=False)
        self._own_http = http is None
        self.rng = rng or random.Random()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._kick = {r.name: threading.Event() for r in self.receivers}
        self._threads: list[threading.Thread] = []
        self._housekept = float("-inf")
        self._failing: dict[str, bool] = {}  # receivers whose last attempt failed
        self._resent: dict[str, float] = {}  # receiver → monotonic time of the last re-post
        # per receiver: outcomes not recorded yet (only that receiver's thread touches them)
        self._owed: dict[str, list[_Owed]] = {r.name: [] for r in self.receivers}
        self._identity: Any = None  # store.InstanceLock once start() ran
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
            try:
                self._pay(r)
            except Exception:  # noqa: BLE001 - left in doubt: re-sent with its key
                log.warning(
                    "receiver %s: could not record %d outcomes before stopping",
                    r.name,
                    len(self._owed[r.name]),
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
                r.name: {
                    "failing": self._failing.get(r.name, False),
                    "tokens": self.buckets[r.name].available(),
                }
                for r in self.receivers
            },
        }

    def run_once(self) -> int:
        """Expand and send whatever is due now, on the calling thread; messages sent."""
        self.expand()
        return sum(self.drain(r, block=False) for r in self.receivers)

    # ---- outbox ----------------------------------------------------------------------
    def expand(self) -> int:
        total = 0
        while not self._stop.is_set():
            n = self.store.expand_outbox(
                self.route, limit=EXPAND_BATCH, hold=self._hold if self.fleet else None
            )
            total += n
            if n < EXPAND_BATCH:
                break
        return total

    def _fleet_prone(self, incident: dict[str, Any]) -> bool:
        primary = incident.get("primary") or {}
        return (
            self.fleet is not None
            and incident.get("severity", "critical") == "critical"
            and primary.get("category") in FLEET_PRONE
            and not is_fleet(incident)
        )

    def _hold(self, incident: dict[str, object]) -> float:
        """Seconds a fleet-prone incident's first message waits for its fleet to show."""
        return self.fleet.hold_s if self.fleet and self._fleet_prone(incident) else 0.0

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
        ensure = getattr(self.store, "ensure_schema", None)
        if ensure is None:
            return
        try:
            ensure()
        except Exception:  # noqa: BLE001 - still down, or damaged: readiness reports it
            log.debug("schema check failed", exc_info=True)

    # ---- sending ---------------------------------------------------------------------
    def _send_loop(self, r: ReceiverSettings) -> None:
        kick = self._kick[r.name]
        while not self._stop.is_set():
            try:
                self.drain(r)
                self._resend(r)
            except Exception:
                log.exception("receiver %s: delivery pass failed; retrying", r.name)
                self._stop.wait(1.0)
            kick.wait(self.poll_interval_s)
            kick.clear()

    def _resend(self, r: ReceiverSettings) -> int:
        """Receivers that forget an alert nobody posts again (Alertmanager): every
        ``resend_interval_s`` the open incidents they were told about go out again (outside
        the outbox: a repeat of the current state, not a change; see
        :func:`service.notify.receivers.resender`)."""
        resend = resender(r)
        if resend is None or self._stop.is_set():
            return 0
        if time.monotonic() - self._resent.get(r.name, float("-inf")) < r.resend_interval_s:
            return 0
        self._resent[r.name] = time.monotonic()
        return resend(self.store, self.http, r, self.settings, self.clock)

    def drain(self, r: ReceiverSettings, block: bool = True) -> int:
        """Send every due group for ``r``; over the rate limit wait (or, with
        ``block=False``, leave the rest for later). Returns messages sent."""
        bucket = self.buckets[r.name]
        sent = 0
        self._pay(r)  # outcomes a database failure left unrecorded, first
        while not self._stop.is_set():
            wait = bucket.wait_time()
            if wait > 0:
                if not block:
                    break
                self._stop.wait(wait)
                continue
            n = max(1, min(self.claim_batch, bucket.available()))
            claims = self.store.claim_deliveries(
                r.name,
                self.instance_id,
                lease_s=r.timeout_s * (n + 2) + 10,
                group_wait_s=self.settings.group_wait_s,
                limit=n,
            )
            if not claims:
                break
            for k, claim in enumerate(claims):
                try:
                    sent += self._deliver(r, claim)
                except Exception:
                    for rest in claims[k + 1 :]:  # give back the ones not tried
                        self._owe(
                            r, _Owed(rest.delivery_ids, "pending", {"in_doubt": rest.in_doubt})
                        )
                    raise
        return sent

    # ---- bookkeeping that survives a database outage ---------------------------------
    def _owe(self, r: ReceiverSettings, owed: _Owed) -> None:
        self._owed[r.name].append(owed)

    def _record(self, r: ReceiverSettings, ids: list[int], status: str, **kwargs: Any) -> int:
        """``store.finish_deliveries``; when the database fails, remembered (and the error
        raised): :meth:`_pay` records it before this receiver claims anything else."""
        try:
            return self.store.finish_deliveries(ids, self.instance_id, status=status, **kwargs)
        except Exception:
            self._owe(r, _Owed(ids, status, kwargs))
            if status == "sent":
                log.warning(
                    "receiver %s: accepted %d deliveries but the store is "
                    "unreachable; recording them when it is back (not sent again)",
                    r.name,
                    len(ids),
                )
            raise

    def _pay(self, r: ReceiverSettings) -> None:
        owed = self._owed[r.name]
        while owed:
            o = owed[0]
            self.store.finish_deliveries(o.ids, self.instance_id, status=o.status, **o.kwargs)
            owed.pop(0)
            if o.status == "sent":
                log.info(
                    "receiver %s: recorded %d deliveries accepted during a store outage",
                    r.name,
                    len(o.ids),
                )

    def _deliver(self, r: ReceiverSettings, c: Claim) -> int:
        ids = c.delivery_ids
        try:
            now = self.clock()
            if now >= c.lease_until - r.timeout_s:  # earlier sends were slow: give it back
                self._record(r, ids, "pending", in_doubt=c.in_doubt)
                return 0
            kind = message_kind(c)
            if kind is None:
                self._finish(r, c, "dropped", NOTE_NEVER_SENT)
                return 0
            # a silence mutes news, never the resolution of an incident the receiver was
            # told about (a PagerDuty alert opened before the silence must close)
            silence = (
                None
                if (kind == "resolved" and not c.first)
                else self.silences.check(c.incident, r.name)
            )
            if silence is not None:
                self._finish(r, c, "silenced", f"silence {silence['id']}")
                return 0
            if c.first and self._fleet_prone(c.incident) and self._inhibited(r, c):
                return 0
            alert = Alert(
                kind,
                c.incident,
                c.version,
                self.settings.external_url,
                min(e.created_at for e in c.events),
            )
            req = builder(r)(alert, r, now)
            req.headers.setdefault("X-Sentinel-Event-Id", alert.event_id)  # every receiver
            req.headers.setdefault("Idempotency-Key", alert.event_id)
            if c.in_doubt:  # an earlier request may have arrived: this may be a repeat
                req.headers["X-Sentinel-Redelivery"] = "true"
        except Exception as exc:  # a rendering bug must not lose the delivery
            if self._owed[r.name]:
                raise  # the store failed: the claim is given back once it is reachable
            log.exception("receiver %s: could not prepare incident %s", r.name, c.incident["id"])
            self._retry(r, c, f"prepare failed: {exc!r}", 0.0)
            return 0
        try:
            held = self.store.mark_sending(ids, self.instance_id)
        except Exception:
            self._owe(r, _Owed(ids, "pending", {"in_doubt": c.in_doubt}))
            raise
        if held < len(ids):  # the lease ran out (a slow pass): someone else may send it
            log.warning(
                "receiver %s: lease on incident %s lost before sending; not sent",
                r.name,
                c.incident["id"],
            )
            self._record(r, ids, "pending", in_doubt=c.in_doubt)
            return 0
        if c.in_doubt:
            metrics.DELIVERIES.labels(receiver=r.name, outcome="redelivered").inc(len(ids))
        self.buckets[r.name].take()
        retry_after = 0.0
        ambiguous = False
        try:
            resp = self.http.post(
                req.url, content=req.body, headers=req.headers, timeout=r.timeout_s
            )
            error = (
                None
                if 200 <= resp.status_code < 300
                else f"HTTP {resp.status_code}: {resp.text[:200]}"
            )
            if error:
                retry_after = _retry_after(resp.headers.get("Retry-After"), self.clock())
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"[:500]
            ambiguous = isinstance(exc, AMBIGUOUS) and not isinstance(exc, AMBIGUOUS_NOT)
        if error is not None:
            self._retry(r, c, error, retry_after, in_doubt=c.in_doubt or ambiguous)
            return 0
        done = self.clock()
        kept = self._record(r, ids, "sent")
        if self._failing.pop(r.name, False):  # reachable again: stop backing off the rest
            try:
                n = self.store.expedite_deliveries(r.name)
                log.info("receiver %s recovered; %d deliveries due now", r.name, n)
            except Exception:  # noqa: BLE001 - they wait out their backoff instead
                log.warning("receiver %s: could not expedite the backlog", r.name, exc_info=True)
        if kept < len(ids):
            log.warning(
                "receiver %s: incident %s was recorded by another instance while this one sent it",
                r.name,
                c.incident["id"],
            )
        metrics.DELIVERIES.labels(receiver=r.name, outcome="sent").inc(len(ids))
        for e in c.events:
            metrics.ALERT_LATENCY.labels(receiver=r.name).observe(max(0.0, done - e.created_at))
        return 1

    def _inhibited(self, r: ReceiverSettings, c: Claim) -> bool:
        """Whether a fleet incident that ``r`` is routed pages instead of this member (its
        deliveries are then finished ``inhibited``)."""
        assert self.fleet is not None
        fid = self.store.inhibit_for_fleet(
            c.incident["id"],
            c.delivery_ids,
            self.instance_id,
            threshold=self.fleet.threshold,
            window_s=self.fleet.window_s,
            covers=lambda fleet: self.router.matches(r, fleet),
        )
        if fid is None:
            return False
        metrics.DELIVERIES.labels(receiver=r.name, outcome="inhibited").inc(len(c.delivery_ids))
        log.info("receiver %s: incident %s inhibited by fleet %s", r.name, c.incident["id"], fid)
        self.wake()  # the fleet's own outbox event may be new
        return True

    def _finish(self, r: ReceiverSettings, c: Claim, status: str, note: str) -> None:
        self._record(r, c.delivery_ids, status, note=note)
        metrics.DELIVERIES.labels(receiver=r.name, outcome=status).inc(len(c.delivery_ids))

    def _retry(
        self, r: ReceiverSettings, c: Claim, error: str, retry_after: float, in_doubt: bool = False
    ) -> None:
        self._failing[r.name] = True
        limit = self.settings.max_attempts
        if limit and c.attempts >= limit:
            log.error(
                "receiver %s: giving up on incident %s after %d attempts: %s",
                r.name,
                c.incident["id"],
                c.attempts,
                error,
            )
            self._finish(r, c, "dropped", error)
            return
        delay = backoff(
            c.attempts,
            self.settings.backoff_base_s,
            self.settings.backoff_max_s,
            self.rng,
            retry_after,
        )
        self._record(
            r,
            c.delivery_ids,
            "pending",
            note=error,
            retry_at=self.clock() + delay,
            in_doubt=in_doubt,
        )
        metrics.DELIVERIES.labels(receiver=r.name, outcome="failed").inc(len(c.delivery_ids))
        log.warning(
            "receiver %s: incident %s attempt %d failed (%s); retry in %.1fs",
            r.name,
            c.incident["id"],
            c.attempts,
            error,
            delay,
        )


def _retry_after(value: str | None, now: float) -> float:
    """Seconds from a Retry-After header (delta seconds or HTTP date), capped at an hour."""
    if not value:
        return 0.0
    try:
        return min(3600.0, max(0.0, float(value)))
    except ValueError:
        pass
    try:
        return min(3600.0, max(0.0, parsedate_to_datetime(value).timestamp() - now))
    except (TypeError, ValueError):
        return 0.0
