"""Large decodes without the cyclic garbage collector.

Decoding a message of a million entries builds millions of containers; each generation
the collector promotes makes it walk every live object of the service (its stream state
included), pauses of half a second and more that stop every thread, the probes too. A
decode that big runs with the collector paused (:func:`paused`; nested and concurrent uses
share one pause): reference counting still frees what it built, and the collector runs as
before once the last such decode ends. A message read in many pieces holds the pause from
its first large piece to its end (:func:`hold` / :func:`release`): its half-built entries
are live in the meantime, and a collection between two pieces would walk them.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
_was_enabled = False


def hold() -> None:
    """Pause the cyclic collector (if it is on) until every :func:`hold` is released."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1


def release() -> None:
    """End one :func:`hold`; the last one turns the collector back on."""
    global _depth
    with _lock:
        _depth -= 1
        if _depth == 0 and _was_enabled:
            gc.enable()


@contextmanager
def paused() -> Iterator[None]:
    """The cyclic collector off for the duration (if it was on)."""
    hold()
    try:
        yield
    finally:
        release()
