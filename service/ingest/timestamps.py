"""Runtime timestamps of every envelope, as epoch seconds (float).

Handles RFC 3339 / ISO 8601 strings with up to nanosecond fractions and any offset
(Docker ``time``, the CRI prefix, Fluent Bit ``iso8601``/``iso8601_ns``, Fluent Bit
``java_sql_timestamp`` = ISO with a space and no zone, taken as UTC), Fluent ``EventTime``
(msgpack ext type 0: 32-bit seconds + 32-bit nanoseconds), msgpack's own Timestamp
(ext -1), integer seconds and float ``@timestamp``/``date`` values. Integers too large to be
seconds are read as milliseconds (> 1e11) or nanoseconds (> 1e14).
"""

from __future__ import annotations

import calendar
import math
import re
import struct
from typing import Any

import msgpack

_EVENT_TIME = struct.Struct(">II")
_MS_THRESHOLD = 100_000_000_000  # 1e11 s is year 5138: anything above is milliseconds
_NS_THRESHOLD = 100_000_000_000_000


class EventTime(float):
    """A Fluent EventTime decoded from msgpack ext type 0 (epoch seconds as float)."""

    __slots__ = ()


def ext_hook(code: int, data: bytes) -> Any:
    """msgpack ``ext_hook`` turning Fluent EventTime (ext 0, 8 bytes) into :class:`EventTime`."""
    if code == 0 and len(data) == 8:
        sec, nsec = _EVENT_TIME.unpack(data)
        return EventTime(sec + nsec / 1e9)
    return msgpack.ExtType(code, data)


_SECONDS: dict[str, int | None] = {}
_SECONDS_MAX = 65536
_MISSING: Any = object()  # the sentinel of _SECONDS.get (Any: base stays int | None)
_POW10: tuple[int, ...] = tuple(10**i for i in range(20))


def _second(prefix: str) -> int | None:
    """Epoch seconds of ``YYYY-MM-DDTHH:MM:SS`` (UTC), memoised: consecutive lines share
    their second, so the calendar arithmetic runs about once per second of log."""
    try:
        return _SECONDS[prefix]
    except KeyError:
        pass
    value = _compute_second(prefix)
    if len(_SECONDS) >= _SECONDS_MAX:
        _SECONDS.clear()
    _SECONDS[prefix] = value
    return value


def _compute_second(prefix: str) -> int | None:
    if prefix[4] != "-" or prefix[7] != "-" or prefix[13] != ":" or prefix[16] != ":":
        return None
    if prefix[10] not in "Tt ":
        return None
    digits = (
        prefix[0:4] + prefix[5:7] + prefix[8:10] + prefix[11:13] + prefix[14:16] + prefix[17:19]
    )
    if not (digits.isascii() and digits.isdigit()):
        return None
    year, month, day = int(digits[0:4]), int(digits[4:6]), int(digits[6:8])
    hour, minute, sec = int(digits[8:10]), int(digits[10:12]), int(digits[12:14])
    if not (1 <= month <= 12 and 1 <= day <= 31 and hour < 24 and minute < 60 and sec <= 60):
        return None
    if year < 1 or day > calendar.monthrange(year, month)[1]:
        return None
    return calendar.timegm((year, month, day, hour, minute, sec, 0, 0, 0))


def parse_rfc3339(text: str) -> float | None:
    """Parse ``2026-07-27T10:11:12.123456789Z`` (or ``+02:00``, ``t``/space separator, no zone
    = UTC) into epoch seconds; ``None`` when it is not such a timestamp."""
    if len(text) < 19:
        return None
    prefix = text[:19]
    base: int | None = _SECONDS.get(prefix, _MISSING)
    if base is _MISSING:
        base = _second(prefix)
    if base is None:
        return None
    if text[-1] == "Z" and text[19] == ".":  # fast path: runtime timestamps
        digits = text[20:-1]
        if digits.isdigit() and digits.isascii() and len(digits) < 20:
            return base + int(digits) / _POW10[len(digits)]
    n = len(text)
    i = 19
    frac = 0.0
    if i < n and text[i] in ".,":
        j = i + 1
        while j < n and "0" <= text[j] <= "9":
            j += 1
        digits = text[i + 1 : j]
        if not digits or len(digits) >= 20:
            return None
        frac = int(digits) / _POW10[len(digits)]
        i = j
    if i == n:
        return base + frac
    zone = text[i:]
    if zone in ("Z", "z"):
        return base + frac
    if zone[0] in "+-" and len(zone) in (3, 5, 6):
        hh, mm = zone[1:3], zone[-2:] if len(zone) > 3 else "00"
        digits = hh + mm
        if not (digits.isascii() and digits.isdigit()) or (len(zone) == 6 and zone[3] != ":"):
            return None
        offset = int(hh) * 3600 + int(mm) * 60
        return base + frac - offset if zone[0] == "+" else base + frac + offset
    return None


def to_epoch(value: Any) -> float | None:
    """Any supported time value as epoch seconds; ``None`` for missing, zero or unparsable."""
    if value is None or value is True or value is False:
        return None
    if isinstance(value, float):
        if not math.isfinite(value) or value <= 0:
            return None
        return float(value)
    if isinstance(value, int):
        if value <= 0:
            return None
        if value > _NS_THRESHOLD:
            return value / 1e9
        if value > _MS_THRESHOLD:
            return value / 1e3
        return float(value)
    if isinstance(value, str):
        if not value:
            return None
        if value[0].isdigit() and len(value) >= 19 and value[4] == "-":
            return parse_rfc3339(value)
        try:
            return to_epoch(float(value)) if value.isascii() else None
        except ValueError:
            return None
    if isinstance(value, msgpack.Timestamp):
        unix: float = value.to_unix()
        return unix
    if isinstance(value, msgpack.ExtType) and value.code == 0 and len(value.data) == 8:
        sec: int
        nsec: int
        sec, nsec = _EVENT_TIME.unpack(value.data)
        return sec + nsec / 1e9
    return None


# ---- times written in the log line itself (offline logs without an envelope time) --------
_LINE_ISO = re.compile(r"(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?")
_LINE_MD = re.compile(r"(?<![\d-])(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")  # vLLM "12-02 14:58:06"
_LINE_GLOG = re.compile(r"\[?[EWIF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)")  # glog / torch c10


def line_time(text: str, year: int) -> float | None:
    """Epoch seconds of the time a log line prints near its start (ISO 8601, vLLM's
    ``MM-DD HH:MM:SS`` or glog's ``Lmmdd HH:MM:SS``, read as UTC; ``year`` fills in the
    year the last two omit), or None."""
    head = text[:160]
    m = _LINE_ISO.search(head)
    try:
        if m:
            y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
            frac = float("0." + m.group(7)) if m.group(7) else 0.0
            return calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) + frac
        m = _LINE_MD.search(head) or _LINE_GLOG.search(head)
        if m:
            mo, d, h, mi, s = (int(g) for g in m.groups())
            if not (1 <= mo <= 12 and 1 <= d <= 31 and h < 24 and mi < 60 and s < 61):
                return None
            return float(calendar.timegm((year, mo, d, h, mi, s, 0, 0, 0)))
    except (ValueError, OverflowError):
        return None
    return None
