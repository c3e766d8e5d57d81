"""The sink side of the batch hook: a sink's driver-side commit tells the job runtime about a batch.

A two-phase-commit sink's ``commit(messages, batch_id)`` runs in a Spark Python worker, not in the
driver process (docs/architecture.md, *PySpark facts*), so it reaches the runtime over the
driver endpoint (``POST /v1/batches/{batch}/{stage}``):

* ``prepare`` before it publishes batch N: the runtime makes checkpoint N - 1 and the raw
  ``offsets/N`` entry durable, so a restore replays exactly this N (docs/streaming-runtime.md);
* ``published`` after batch N is published (or found published, on a replay): the runtime
  finishes N's splits and snapshots the coordinators at N, before ``commits/N`` exists.

Both calls block the commit until the runtime answered: that is what makes them synchronous with
Spark's own protocol. Standard library only (``transport``), because it runs in every worker.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from finishable.connectors.driver_calls import post_json

HOOK_OPTION = "batch_hook"
"""The sink option carrying the hook's address and token (JSON)."""


class BatchHookError(RuntimeError):
    """The runtime refused or failed a batch notification; the sink's commit must fail."""


@dataclass(frozen=True)
class BatchHookClient:
    """Calls the runtime's batch hook; retries while the endpoint is unreachable."""

    url: str
    token: str
    sink: str
    timeout: float = 600.0
    """One call may store a checkpoint in remote storage: be patient."""
    connect_retries: float = 60.0

    def to_option(self) -> str:
        return json.dumps({"url": self.url, "token": self.token})

    @classmethod
    def from_option(cls, text: str, sink: str) -> BatchHookClient:
        try:
            document = json.loads(text)
            return cls(str(document["url"]), str(document["token"]), sink)
        except (ValueError, KeyError, TypeError) as error:
            raise BatchHookError(f"the sink option {HOOK_OPTION!r} is malformed: {error}") from None

    def notify(self, stage: str, batch_id: int) -> dict[str, Any]:
        """Tell the runtime that ``batch_id`` reached ``stage``; its reply, or BatchHookError."""
        return post_json(
            f"{self.url}/v1/batches/{batch_id}/{stage}",
            self.token,
            {"sink": self.sink},
            timeout=self.timeout,
            connect_retries=self.connect_retries,
            refused=lambda code, message: BatchHookError(
                f"the job runtime refused {stage} of batch {batch_id} for sink {self.sink!r}: "
                f"HTTP {code}: {message}"
            ),
            unreachable=lambda error: BatchHookError(
                f"the job runtime at {self.url} did not answer {stage} of batch {batch_id}: {error}"
            ),
        )
