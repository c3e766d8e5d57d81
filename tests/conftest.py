"""Fixtures shared by every test tier: the in-process Kubernetes API emulator over HTTP."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testcluster.apiserver.emulator import EmulatorServer

TOKEN = "test-token"
"""The bearer token the emulator demands; requests without it get 401."""


@pytest.fixture(scope="session")
def k8s_server() -> Iterator[EmulatorServer]:
    with EmulatorServer(required_token=TOKEN) as server:
        yield server
