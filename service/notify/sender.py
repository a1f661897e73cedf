"""One receiver's dispatch loop: claim the due (incident, receiver) groups, send each once,
record the outcome, back off on failure.

A claim passes these stages, in order:

1. lease check: a claim whose lease would run out during the request is given back;
2. message kind (:func:`~service.notify.outbox.message_kind`): the resolution of an incident
   the receiver never heard of is ``dropped``;
3. silences: a matching silence ends it ``silenced``. A silence mutes news, never a
   resolution: a receiver that was told an incident opened (a PagerDuty alert is open)
   hears that it resolved, silenced or not;
4. fleet inhibition (:mod:`~service.notify.fleet_hold`): a member whose fleet pages ends
   ``inhibited``;
5. render: the receiver type's builder (:mod:`~service.notify.receivers`) makes the request
   from the incident's current state, once for the whole group;
6. send: marked as going out, a rate-limit token taken, posted; a 2xx is ``sent``, anything
   else is retried with exponential backoff and full jitter (forever unless
   ``max_attempts``), no earlier than the receiver's ``Retry-After``.

No message twice (see :mod:`service.store.deliveries`): a delivery is marked as going out
before its request is sent, and its outcome is recorded through the receiver's
:class:`~service.notify.ledger.Ledger`, which survives a database outage. What a process
that died with a request on the wire leaves is sent again with the same
``Idempotency-Key`` (and ``X-Sentinel-Redelivery: true``): the receiver may have it
(PagerDuty deduplicates on ``dedup_key``; a webhook receiver should on the key).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from email.utils import parsedate_to_datetime

import httpx

from service import metrics
from service.config import NotifySettings, ReceiverSettings
from service.notify.alert import Alert
from service.notify.fleet_hold import FleetHold
from service.notify.ledger import Ledger, Outcome
from service.notify.outbox import NOTE_NEVER_SENT, backoff, message_kind
from service.notify.ratelimit import TokenBucket
from service.notify.receivers import builder, post, resender
from service.notify.silences import SilenceCache
from service.store import Claim, Store

log = logging.getLogger("vllm_sentinel.notify")
NOTE_ACKED_IN_SLACK = "acknowledged from Slack: that message was updated there"
# errors after which the receiver may have the request (vs. refused before it was sent)
AMBIGUOUS = (httpx.TimeoutException, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
AMBIGUOUS_NOT = (httpx.ConnectTimeout, httpx.PoolTimeout)


class Sender:
    """The deliveries of one receiver, run by that receiver's thread."""

    def __init__(
        self,
        receiver: ReceiverSettings,
        *,
        store: Store,
        instance_id: str,
        settings: NotifySettings,
        clock: Callable[[], float],
        http: httpx.Client,
        rng: random.Random,
        silences: SilenceCache,
        fleet: FleetHold | None,
        claim_batch: int,
        stop: threading.Event,
        wake: Callable[[], None],
    ) -> None:
        self.receiver = receiver
        self.store = store
        self.instance_id = instance_id
        self.settings = settings
        self.clock = clock
        self.http = http
        self.rng = rng
        self.silences = silences
        self.fleet = fleet
        self.claim_batch = claim_batch
        self._stop = stop
        self._wake = wake  # the outbox thread: a fleet found here has its own outbox event
        self.bucket = TokenBucket(receiver.rate_limit_per_minute)
        self.ledger = Ledger(store, instance_id, receiver.name)
        self.failing = False  # the last attempt failed
        self._resent = float("-inf")  # monotonic time of the last re-post

    def drain(self, block: bool = True) -> int:
        """Send every due group; over the rate limit wait (or, with ``block=False``, leave
        the rest for later). Returns messages sent."""
        r = self.receiver
        sent = 0
        self.ledger.pay()  # outcomes a database failure left unrecorded, first
        while not self._stop.is_set():
            wait = self.bucket.wait_time()
            if wait > 0:
                if not block:
                    break
                self._stop.wait(wait)
                continue
            n = max(1, min(self.claim_batch, self.bucket.available()))
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
                    sent += self.deliver(claim)
                except Exception:
                    for rest in claims[k + 1 :]:  # give back the ones not tried
                        self.ledger.owe(
                            Outcome(rest.delivery_ids, "pending", in_doubt=rest.in_doubt)
                        )
                    raise
        return sent

    def resend(self) -> int:
        """Receivers that forget an alert nobody posts again (Alertmanager): every
        ``resend_interval_s`` the open incidents they were told about go out again (outside
        the outbox: a repeat of the current state, not a change; see
        :func:`service.notify.receivers.resender`)."""
        r = self.receiver
        resend = resender(r)
        if resend is None or self._stop.is_set():
            return 0
        if time.monotonic() - self._resent < r.resend_interval_s:
            return 0
        self._resent = time.monotonic()
        return resend(self.store, self.http, r, self.settings, self.clock)

    def deliver(self, c: Claim) -> int:
        """One claim through the stages; 1 when it was sent."""
        r = self.receiver
        ids = c.delivery_ids
        try:
            now = self.clock()
            if now >= c.lease_until - r.timeout_s:  # earlier sends were slow: give it back
                self.ledger.record(Outcome(ids, "pending", in_doubt=c.in_doubt))
                return 0
            kind = message_kind(c)
            if kind is None:
                self._finish(c, "dropped", NOTE_NEVER_SENT)
                return 0
            # a silence mutes news, never the resolution of an incident the receiver was
            # told about (a PagerDuty alert opened before the silence must close)
            silence = (
                None
                if (kind == "resolved" and not c.first)
                else self.silences.check(c.incident, r.name)
            )
            if silence is not None:
                self._finish(c, "silenced", f"silence {silence['id']}")
                return 0
            fleet = self.fleet
            if (
                c.first
                and fleet is not None
                and fleet.prone(c.incident)
                and self._inhibited(fleet, c)
            ):
                return 0
            if kind == "acknowledged" and r.type == "slack" and c.ack and c.ack.via == "slack":
                self._finish(c, "dropped", NOTE_ACKED_IN_SLACK)
                return 0
            alert = Alert(
                kind,
                c.incident,
                c.version,
                self.settings.external_url,
                min(e.created_at for e in c.events),
                ack=c.ack,
                assignee=c.assignee,
            )
            req = builder(r)(alert, r, now)
            req.headers.setdefault("X-Sentinel-Event-Id", alert.event_id)  # every receiver
            req.headers.setdefault("Idempotency-Key", alert.event_id)
            if c.in_doubt:  # an earlier request may have arrived: this may be a repeat
                req.headers["X-Sentinel-Redelivery"] = "true"
        except Exception as exc:  # a rendering bug must not lose the delivery
            if self.ledger.owed:
                raise  # the store failed: the claim is given back once it is reachable
            log.exception("receiver %s: could not prepare incident %s", r.name, c.incident["id"])
            self._retry(c, f"prepare failed: {exc!r}", 0.0)
            return 0
        try:
            held = self.store.mark_sending(ids, self.instance_id)
        except Exception:
            self.ledger.owe(Outcome(ids, "pending", in_doubt=c.in_doubt))
            raise
        if held < len(ids):  # the lease ran out (a slow pass): someone else may send it
            log.warning(
                "receiver %s: lease on incident %s lost before sending; not sent",
                r.name,
                c.incident["id"],
            )
            self.ledger.record(Outcome(ids, "pending", in_doubt=c.in_doubt))
            return 0
        if c.in_doubt:
            metrics.DELIVERIES.labels(receiver=r.name, outcome="redelivered").inc(len(ids))
        self.bucket.take()
        retry_after = 0.0
        ambiguous = False
        try:
            resp = post(self.http, req, r.timeout_s)
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
            self._retry(c, error, retry_after, in_doubt=c.in_doubt or ambiguous)
            return 0
        done = self.clock()
        kept = self.ledger.record(Outcome(ids, "sent"))
        if self.failing:  # reachable again: stop backing off the rest
            self.failing = False
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

    def _inhibited(self, fleet: FleetHold, c: Claim) -> bool:
        """Whether a fleet incident this receiver is routed pages instead of this member."""
        r = self.receiver
        fid = fleet.fleet_for(r, c)
        if fid is None:
            return False
        metrics.DELIVERIES.labels(receiver=r.name, outcome="inhibited").inc(len(c.delivery_ids))
        log.info("receiver %s: incident %s inhibited by fleet %s", r.name, c.incident["id"], fid)
        self._wake()  # the fleet's own outbox event may be new
        return True

    def _finish(self, c: Claim, status: str, note: str) -> None:
        self.ledger.record(Outcome(c.delivery_ids, status, note=note))
        metrics.DELIVERIES.labels(receiver=self.receiver.name, outcome=status).inc(
            len(c.delivery_ids)
        )

    def _retry(self, c: Claim, error: str, retry_after: float, in_doubt: bool = False) -> None:
        r = self.receiver
        self.failing = True
        limit = self.settings.max_attempts
        if limit and c.attempts >= limit:
            log.error(
                "receiver %s: giving up on incident %s after %d attempts: %s",
                r.name,
                c.incident["id"],
                c.attempts,
                error,
            )
            self._finish(c, "dropped", error)
            return
        delay = backoff(
            c.attempts,
            self.settings.backoff_base_s,
            self.settings.backoff_max_s,
            self.rng,
            retry_after,
        )
        self.ledger.record(
            Outcome(
                c.delivery_ids,
                "pending",
                note=error,
                retry_at=self.clock() + delay,
                in_doubt=in_doubt,
            )
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
