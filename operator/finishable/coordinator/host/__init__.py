"""Runs one coordinator on a dedicated thread and guarantees the contract's call order.

``CoordinatorHost`` (``host``) is the public face: every method may be called from any thread and
returns a ``concurrent.futures.Future``. It is built in layers: the coordinator's own thread and
the checks every call passes (``thread``), the calls of subtask attempts with their order rules and
the request-id dedup (``attempts``); the gateway and context the coordinator itself is handed
live in ``gateway``.
"""

from finishable.coordinator.host.attempts import RemoteAttemptFailure
from finishable.coordinator.host.host import CoordinatorHost

__all__ = ["CoordinatorHost", "RemoteAttemptFailure"]
