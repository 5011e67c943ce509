"""A fault's budget: how many more calls it hits (``left``: N, -1 for every call, 0 for none) and how many it hit."""

from __future__ import annotations

import threading

__all__ = ["Throttle"]


class Throttle:
    """``take()`` is True while ``left`` is not 0 (and counts one off a positive ``left``); ``throttled`` counts
    the calls it was True for. Thread-safe: the callers are a Lambda's worker threads."""

    def __init__(self) -> None:
        self.left = 0
        self.throttled = 0
        self.lock = threading.Lock()

    def take(self) -> bool:
        with self.lock:
            if self.left == 0:
                return False
            if self.left > 0:
                self.left -= 1
            self.throttled += 1
            return True
