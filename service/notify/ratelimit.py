"""Per-receiver token bucket: over the limit a sender waits; nothing is dropped."""

from __future__ import annotations

import math
import threading
import time


class TokenBucket:
    def __init__(self, per_minute: float, burst: int | None = None) -> None:
        self.rate = per_minute / 60.0
        self.capacity = float(burst if burst is not None else max(1, math.ceil(per_minute / 6)))
        self.tokens = self.capacity
        self._at = time.monotonic()
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = time.monotonic()
        self.tokens = min(self.capacity, self.tokens + (now - self._at) * self.rate)
        self._at = now

    def available(self) -> int:
        with self._lock:
            self._refill()
            return int(self.tokens)

    def wait_time(self) -> float:
        """Seconds until one token is available (0 when one is)."""
        with self._lock:
            self._refill()
            return 0.0 if self.tokens >= 1 else (1 - self.tokens) / self.rate

    def take(self) -> None:
        with self._lock:
            self._refill()
            self.tokens -= 1  # may go negative: the next wait_time accounts for it
