"""Judgements beyond a single line: the :class:`~.judgement.Judgement` record, the checks over
a stream that return it (:mod:`.checks`: repeated waits, start-up settings, serving
statistics, stalls, built on :mod:`.stalls` and :mod:`.serving`), and the playbook (first
moves, restart advice, warning advice)."""
