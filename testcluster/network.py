"""A free loopback port for the servers a test starts (moto, Postgres, Prometheus, the operator)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on now; the server that takes it must still handle a lost race."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
