"""Judgements beyond single lines: stalls, crash loops, last good vs now, serving-stats
warnings, the playbook, fleet incidents."""
