"""Rate-limited logging for input-driven messages (rejects, refused connections, EMFILE).

A peer controls how often a reject happens, so a reject must never cost more log than a
bounded amount: :class:`RateLimitedLog` writes at most one line per ``interval`` seconds per
key (e.g. ``(source, reason)``); the next line written for that key says how many were
suppressed meanwhile. Every string argument is clipped to :data:`MAX_CHARS` characters
(escaped, so no control characters or line breaks of the input reach the log). Exact
counts live in the Prometheus counters, not in the log.

:func:`reject` counts ``sentinel_rejects_total{source, reason}`` and logs that way.
:func:`service.ratelog.reject` (used by the shared envelope and the other sources) logs on
the ``vllm_sentinel.rejects`` logger; importing this module installs
:class:`RejectLogFilter` on that logger, so those lines are bounded the same way and share
the same per-``(source, reason)`` budget.
"""

from __future__ import annotations

import contextlib
import logging
import reprlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

from service import metrics

DEFAULT_INTERVAL = 10.0
MAX_CHARS = 120
MAX_KEYS = 1024
REJECT_LOGGER = "vllm_sentinel.rejects"


def clip(value: Any, limit: int = MAX_CHARS) -> str:
    """``value`` as at most ``limit`` characters of escaped text (``repr`` escapes for line
    breaks and control characters), followed by the original length when it was cut."""
    if isinstance(value, bytes | bytearray | memoryview):
        size, unit = len(value), "bytes"
        text = repr(bytes(value[:limit]))[2:-1]
    else:
        value = value if isinstance(value, str) else str(value)
        size, unit = len(value), "chars"
        text = repr(value[:limit])[1:-1]
    cut = size > limit
    if len(text) > limit:
        text, cut = text[:limit], True
    return f"{text}... ({size} {unit})" if cut else text


_BRIEF = reprlib.Repr()
_BRIEF.maxlevel, _BRIEF.maxdict, _BRIEF.maxlist, _BRIEF.maxtuple = 3, 4, 4, 4
_BRIEF.maxstring, _BRIEF.maxother, _BRIEF.maxlong = 60, 60, 40


def brief(value: Any) -> str:
    """A short ``repr`` of an untrusted object, built in bounded time and memory (never the
    whole repr of a big map first)."""
    return clip(_BRIEF.repr(value))


class RateLimiter:
    """Per-key "may I?" with a suppressed count; thread-safe, at most ``max_keys`` keys (the
    oldest is forgotten first)."""

    def __init__(
        self,
        interval: float = DEFAULT_INTERVAL,
        *,
        max_keys: int = MAX_KEYS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval = interval
        self.max_keys = max_keys
        self.clock = clock
        self._lock = threading.Lock()
        self._keys: OrderedDict[Hashable, list[float]] = OrderedDict()  # key -> [last, held]

    def hit(self, key: Hashable) -> int | None:
        """``None`` when this occurrence must be suppressed; otherwise the number suppressed
        since the last one let through."""
        now = self.clock()
        with self._lock:
            state = self._keys.get(key)
            if state is not None and now - state[0] < self.interval:
                state[1] += 1
                return None
            held = int(state[1]) if state is not None else 0
            self._keys[key] = [now, 0]
            self._keys.move_to_end(key)
            while len(self._keys) > self.max_keys:
                self._keys.popitem(last=False)
            return held


_redact: Callable[[str], str] | None = None


def redact_details_with(redact: Callable[[str], str] | None) -> None:
    """Mask secrets in the arguments of every rate-limited line written (a reject's quoted
    input, above all) with ``redact``: the service and the CLI install their rule book's
    redactor (:mod:`service.classify.redaction`)."""
    global _redact
    _redact = redact


def _redacted(value: Any) -> Any:
    return _redact(value) if _redact is not None and isinstance(value, str) else value


class RateLimitedLog:
    """A logger wrapper writing at most one line per ``interval`` per key."""

    def __init__(
        self,
        logger: logging.Logger | str,
        interval: float = DEFAULT_INTERVAL,
        *,
        max_chars: int = MAX_CHARS,
        limiter: RateLimiter | None = None,
    ) -> None:
        self.logger = logging.getLogger(logger) if isinstance(logger, str) else logger
        self.max_chars = max_chars
        self.limiter = limiter or RateLimiter(interval)

    def log(self, level: int, key: Hashable, msg: str, *args: Any, exc_info: Any = None) -> bool:
        """Log ``msg % args`` unless ``key`` logged within the interval; True when written."""
        held = self.limiter.hit(key)
        if held is None:
            return False
        # only lines written are redacted: a flood of rejects costs no redaction
        args = tuple(_clip_arg(_redacted(a), self.max_chars) for a in args)
        if held:
            msg += " (%d more like this suppressed in the last %.0f s)"
            args += (held, self.limiter.interval)
        self.logger.log(level, msg, *args, exc_info=exc_info, extra={"rate_limited": True})
        return True

    def warning(self, key: Hashable, msg: str, *args: Any, exc_info: Any = None) -> bool:
        return self.log(logging.WARNING, key, msg, *args, exc_info=exc_info)

    def error(self, key: Hashable, msg: str, *args: Any, exc_info: Any = None) -> bool:
        return self.log(logging.ERROR, key, msg, *args, exc_info=exc_info)


def _clip_arg(value: Any, limit: int) -> Any:
    if isinstance(value, str | bytes | bytearray | memoryview):
        return clip(value, limit)
    return value


class RejectLogFilter(logging.Filter):
    """Bounds the lines of :func:`service.ratelog.reject` (``"rejected input from %s: %s
    %s"``): one per ``(source, reason)`` per interval, arguments clipped."""

    def __init__(self, log: RateLimitedLog) -> None:
        super().__init__()
        self.log = log

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "rate_limited", False):
            return True  # already limited by RateLimitedLog
        args = record.args if isinstance(record.args, tuple) else ()
        key = tuple(str(a) for a in args[:2]) if len(args) >= 2 else (record.msg,)
        held = self.log.limiter.hit(key)
        if held is None:
            return False
        record.args = (
            tuple(_clip_arg(_redacted(a), self.log.max_chars) for a in args) or record.args
        )
        if held:
            record.msg = (
                f"{record.msg} ({held} more like this suppressed in the last "
                f"{self.log.limiter.interval:.0f} s)"
            )
        return True


REJECTS_LOG = RateLimitedLog(REJECT_LOGGER)
_LOOP_LOG = RateLimitedLog("vllm_sentinel.loop")


def loop_exception_handler(loop: Any, context: dict[str, Any]) -> None:
    """asyncio exception handler that bounds what a flood can make the event loop log.

    asyncio's own servers (uvicorn's API listener) report ``accept()`` failing for lack of
    descriptors or memory once per pending connection, each with a traceback; this writes one
    line per 10 s per message instead (with the suppressed count). Anything else goes to the
    default handler."""
    message = str(context.get("message", ""))
    if "out of system resource" in message:
        exc = context.get("exception")
        _LOOP_LOG.error(("loop", message), "%s: %s (listener backs off and retries)", message, exc)
        return
    loop.default_exception_handler(context)


def install_reject_filter(logger: logging.Logger | None = None) -> None:
    """Rate-limit :func:`service.ratelog.reject`'s lines (idempotent)."""
    target = logger or logging.getLogger(REJECT_LOGGER)
    if not any(isinstance(f, RejectLogFilter) for f in target.filters):
        target.addFilter(RejectLogFilter(REJECTS_LOG))


_REJECT_COUNTERS: dict[tuple[str, str], Any] = {}


def reject(source: str, reason: str, detail: Any = "") -> None:
    """Count one rejected input (``sentinel_rejects_total``) and log it at a bounded rate,
    with at most :data:`MAX_CHARS` characters of ``detail``; never raises."""
    counter = _REJECT_COUNTERS.get((source, reason))
    if counter is None:  # labels() costs ~10 us a call: keep each child once looked up
        counter = _REJECT_COUNTERS[source, reason] = metrics.REJECTS.labels(
            source=source, reason=reason
        )
    counter.inc()
    with contextlib.suppress(Exception):  # logging must never break ingest
        REJECTS_LOG.warning(
            (source, reason), "rejected input from %s: %s %s", source, reason, detail
        )


install_reject_filter()
