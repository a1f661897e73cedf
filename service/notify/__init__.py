"""Notifications: outbox events → routed, silenced, rate-limited deliveries to receivers
(Slack, generic webhook, PagerDuty), sent by a background dispatcher."""
