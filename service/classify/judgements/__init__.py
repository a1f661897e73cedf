"""Judgements beyond a single line, registered by kind (:mod:`.registry`): each kind is one
module here with its block of ``rules/judgements.yaml`` - stalls, repeated waits, start-up
settings, serving statistics, crash loops, fleets, repeated failures - returning typed
:class:`~.judgement.Judgement` records (or a crash loop) that the incident book applies; and
the playbook (first moves, restart advice, warning advice)."""
