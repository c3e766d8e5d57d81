"""What the local cluster's controllers share: a thread that lists what it needs and converges
on it every SYNC_SECONDS, as a real controller does on its informers' resyncs."""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from typing import Any, Self

from finishable.kube.api import KubeApi

log = logging.getLogger(__name__)

SYNC_SECONDS = 0.5


class PollingController(ABC):
    """Subclasses implement :meth:`sync`; errors are logged and the next pass tries again."""

    name = "controller"
    period = SYNC_SECONDS  # seconds between passes

    def __init__(self, api: KubeApi) -> None:
        self.api = api
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    @abstractmethod
    def sync(self) -> None:
        """One pass: list what the controller owns and converge on it."""

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync()
            except Exception:
                log.exception("%s sync failed; retrying", self.name)
            self._stop.wait(self.period)

    def _list(self, path: str) -> list[dict[str, Any]]:
        response = self.api.request("GET", path)
        if response.status != 200:
            raise RuntimeError(f"GET {path}: {response.status} {response.message}")
        return list(response.body.get("items") or [])
