"""Instants (epoch seconds or ISO 8601) and durations (``90s``, ``15m``, ``2h``, ``1d12h``)
as the API accepts them."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)", re.IGNORECASE)
MAX_LEN = 64  # longer than any real instant or duration; bounds the patterns' work
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_instant(value: str | float | int) -> float:
    """Epoch seconds from a number, a numeric string or an ISO 8601 / RFC 3339 time (a time
    without a zone is taken as UTC). ``ValueError`` otherwise."""
    if isinstance(value, bool):
        raise ValueError("expected epoch seconds or an ISO 8601 time")
    if isinstance(value, int | float):
        t = float(value)
    else:
        if len(value) > MAX_LEN:
            raise ValueError(f"time longer than {MAX_LEN} characters")
        s = value.strip()
        try:
            t = float(s)
        except ValueError:
            t = _iso(s)
    if not math.isfinite(t) or t < 0:
        raise ValueError("expected a finite, non-negative time")
    return t


def _iso(s: str) -> float:
    if s.endswith(("z", "Z")):
        s = s[:-1] + "+00:00"
    frac = re.search(r"\.(\d{7,})", s)  # nanoseconds (RFC3339Nano): datetime takes 6 digits
    if frac:
        s = s[: frac.start(1)] + frac.group(1)[:6] + s[frac.end(1) :]
    try:
        dt = datetime.fromisoformat(s)
    except ValueError:
        raise ValueError(f"not epoch seconds or an ISO 8601 time: {s!r}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def parse_duration(value: str) -> float:
    """Seconds in a duration like ``2h``, ``90m``, ``1h30m``, ``1d``, ``45s`` (a bare number
    is seconds). ``ValueError`` unless it is a positive duration."""
    if len(value) > MAX_LEN:
        raise ValueError(f"duration longer than {MAX_LEN} characters")
    s = value.strip().lower()
    try:
        seconds = float(s)
    except ValueError:
        pos = 0
        seconds = 0.0
        for m in _DURATION.finditer(s):
            if s[pos : m.start()].strip():
                break
            seconds += float(m.group(1)) * _UNIT[m.group(2).lower()]
            pos = m.end()
        if pos == 0 or s[pos:].strip():
            raise ValueError(f"not a duration (e.g. 90s, 15m, 2h, 1d12h): {value!r}") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError("duration must be positive")
    return seconds
