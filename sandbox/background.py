"""A simulated controller's loop: ``step()`` every ``interval`` seconds in a daemon thread until
``stop()``; a failing step is logged and kept in ``errors`` (the loop goes on, as a controller's
reconcile loop does)."""

from __future__ import annotations

import logging
import threading
from typing import Self

__all__ = ["BackgroundLoop"]


class BackgroundLoop:
    """Subclasses implement ``step()`` and call ``super().__init__(name)``."""

    def __init__(self, name: str) -> None:
        self.loop_name = name
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._errors_lock = threading.Lock()

    def step(self) -> int:
        raise NotImplementedError

    def run_in_background(self, interval: float = 0.05) -> Self:
        if self._thread is not None and self._thread.is_alive():
            return self
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, args=(interval,), name=self.loop_name, daemon=True)
        self._thread.start()
        return self

    def _loop(self, interval: float) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception as exc:
                logging.getLogger(type(self).__module__).exception("%s step failed", self.loop_name)
                with self._errors_lock:
                    self.errors.append(exc)
            self._stop.wait(interval)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
