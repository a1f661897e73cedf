"""Judgements beyond a single line: stalls, serving statistics, the playbook (first moves,
restart advice, warning advice). Thresholds and lists are rules data (``rules/``)."""
