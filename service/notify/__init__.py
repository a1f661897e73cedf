"""Notifications: outbox events → routed, silenced, rate-limited deliveries to receivers, at
least once, each stage in its own module.

- :mod:`.outbox` — expanding changes into per-receiver deliveries, the message a claim
  becomes, the retry schedule; :mod:`.routing` and :mod:`.silences` decide who hears what.
- :mod:`.fleet_hold` — the first message of a fleet-prone incident waits for its fleet,
  which then pages instead of it.
- :mod:`.sender` — one receiver's loop: claim, silence, inhibit, render, send, record, back
  off; :mod:`.ledger` keeps outcomes a database outage interrupted.
- :mod:`.dispatcher` — the threads that run them and the instance's identity.
- Receivers: :mod:`.slack`, :mod:`.webhook`, :mod:`.pagerduty`, :mod:`.alertmanager`, each a
  pure builder of the request for an :class:`.alert.Alert`, listed in :mod:`.receivers`
  (adding one never touches delivery).
"""
