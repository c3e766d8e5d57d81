"""The one writer of a FinishableSparkJob's status.

The status is patched through the status subresource with a JSON merge patch that holds exactly
the difference between what is stored and what the phase machine decided, with ``null`` for
every field that went away (a merge patch leaves absent keys alone, so a cleared
``pendingRequest`` must be deleted explicitly). Metrics and the Kubernetes Events of the
decision follow a successful write, so what Prometheus and ``kubectl describe`` show never runs
ahead of what is stored.

Every patch carries the ``resourceVersion`` the decision was made on, so it is conditional: if
anything wrote the job since (a user's edit, or a second operator started by mistake without
peering), the API server answers 409 and the writer raises
:class:`~finishable.controller.apicalls.Conflict`. The loop then reads the job again and decides
again; no newer status is ever overwritten by a decision taken on an older one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from finishable.api.models import API_GROUP, API_VERSION, PLURAL, dump
from finishable.api.status import FinishableSparkJobStatus
from finishable.controller.apicalls import Kube
from finishable.controller.metrics import Metrics
from finishable.kube.objects import JobRef
from finishable.lifecycle.decisions import Decision, Event

log = logging.getLogger(__name__)

EventPoster = Callable[[Event], None]


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The RFC 7386 merge patch that turns ``old`` into ``new`` (empty when equal)."""
    patch: dict[str, Any] = dict.fromkeys(old.keys() - new.keys())
    for key, value in new.items():
        previous = old.get(key)
        if isinstance(value, Mapping) and isinstance(previous, Mapping):
            nested = merge_patch(previous, value)
            if nested:
                patch[key] = nested
        elif key not in old or value != previous:
            patch[key] = value
    return patch


class StatusWriter:
    """Writes one job's status; the only code that does."""

    def __init__(self, kube: Kube, metrics: Metrics) -> None:
        self.kube = kube
        self.metrics = metrics

    async def write(
        self,
        job: JobRef,
        stored: Mapping[str, Any],
        before: FinishableSparkJobStatus,
        decision: Decision,
        *,
        now: datetime,
        shuffle_replicas: int,
        post: EventPoster,
        resource_version: str | None = None,
        request_deadline: datetime | None = None,
    ) -> tuple[dict[str, Any], str | None] | None:
        """Store the decided status if the job is still at ``resource_version``; return it as
        stored with the job's new resourceVersion, or None when the job is gone."""
        document = dump(decision.status)
        patch = merge_patch(stored, document)
        if patch:
            written = await self.kube.patch_status(
                f"{API_GROUP}/{API_VERSION}",
                PLURAL,
                job.name,
                job.namespace,
                patch,
                resource_version=resource_version,
            )
            if written is None:
                log.info("%s/%s is gone; its status was not written", job.namespace, job.name)
                return None
            resource_version = (written.get("metadata") or {}).get("resourceVersion")
        self.metrics.record(
            (job.namespace, job.name),
            before,
            decision.status,
            now,
            shuffle_replicas=shuffle_replicas,
            request_deadline=request_deadline,
        )
        for event in decision.events:
            post(event)
        return document, resource_version
