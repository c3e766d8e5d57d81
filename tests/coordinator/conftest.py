"""Fixtures of the coordinator tests: hosts that are always closed, and a served endpoint."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from finishable.coordinator import CoordinatorHost, CoordinatorProvider
from finishable.coordinator.endpoint import DriverEndpoint

from ._helpers import TIMEOUT, TOKEN

HostFactory = Callable[..., CoordinatorHost]


@pytest.fixture
def make_host() -> Iterator[HostFactory]:
    """Create hosts (started unless ``start=False``); all are closed after the test."""
    hosts: list[CoordinatorHost] = []

    def make(
        provider: CoordinatorProvider, name: str = "source", *, start: bool = True, **kwargs: object
    ) -> CoordinatorHost:
        host = CoordinatorHost(name, provider, **kwargs)  # type: ignore[arg-type]
        hosts.append(host)
        if start:
            host.start().result(TIMEOUT)
        return host

    yield make
    for host in hosts:
        host.close()


@pytest.fixture
def endpoint() -> Iterator[DriverEndpoint]:
    """A started endpoint on a free port, stopped after the test."""
    served = DriverEndpoint(TOKEN)
    served.start()
    yield served
    served.stop()
