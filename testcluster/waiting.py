"""Waiting for what a cluster must do: poll with a generous upper bound, never assert on how long
something took (the operator tests, the e2e suite and the benchmarks all wait this way)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

WAIT_SECONDS = 45.0
T = TypeVar("T")


def wait_for(
    probe: Callable[[], T | None],
    what: str,
    timeout: float = WAIT_SECONDS,
    *,
    on_fail: str | Callable[[], str] = "",
    interval: float = 0.05,
) -> T:
    """Poll until ``probe`` returns something truthy; fail naming ``what`` otherwise, with
    ``on_fail`` (or what it returns: logs, say) appended."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    detail = on_fail() if callable(on_fail) else on_fail
    raise AssertionError(f"{what}: not within {timeout:g}s (last seen: {last!r}){detail}")
