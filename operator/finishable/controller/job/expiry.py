"""Finished and Failed jobs deleted when their time to live ends: the job loop's side of
``lifecycle/ttl.py``.

The deadline is decided with each step of the phase machine and stored by the one status writer
(``status.expiresAt``, the ``TTLScheduled`` Event). At the deadline the loop posts
``TTLExpired`` and deletes the job, conditionally: on its uid (never a new job of the same name)
and on the resourceVersion the expiry was decided on, so that an edit in between (a longer time
to live, a restart) is decided on again instead. The deletion then goes through the job's
finalizer like any other (:mod:`finishable.controller.job.deletion`): the children go, the
savepoints and their FinishableSparkSnapshots stay as ``retainOnDelete`` says. It waits until
the job's newest savepoint is recorded as a snapshot, which would otherwise be created owned by a
job that is going and be collected with it. The deadline depends on nothing kept in memory: an
operator that starts after it deletes the job at once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from finishable.api.models import API_GROUP, API_VERSION, PLURAL, Phase
from finishable.api.status import FinishableSparkJobStatus
from finishable.controller.apicalls import Kube
from finishable.controller.metrics import Metrics
from finishable.controller.status import EventPoster
from finishable.kube.objects import JobRef
from finishable.lifecycle.decisions import Decision, Event
from finishable.lifecycle.ttl import (
    Expiry,
    TimeToLive,
    edits_ttl_only,
    expiry,
    settle,
    stamp,
    time_to_live,
)

log = logging.getLogger(__name__)

RECORDING_RETRY_SECONDS = 5.0
"""How soon an expired job whose newest savepoint is not yet recorded is looked at again."""


@dataclass
class Expirer:
    """One job's time to live, for its loop (``JobLoop``)."""

    kube: Kube
    job: JobRef
    defaults: TimeToLive
    """The operator's own (``--ttl-after-finished``, ``--ttl-after-failed``)."""
    metrics: Metrics
    post: EventPoster
    told: datetime | None = None
    """The deadline this loop posted ``TTLExpired`` for: posted once, however often the
    deletion is tried."""

    def generation(
        self, status: FinishableSparkJobStatus, spec: Mapping[str, Any] | None, generation: int
    ) -> int:
        """The generation the phase machine decides on: the status's own when the edit since
        changed only the time to live of a Failed job, which moves its deadline and restarts
        nothing."""
        ttl_only = edits_ttl_only(status, spec, generation)
        return status.observed_generation if ttl_only else generation

    def settle(
        self,
        decision: Decision,
        before: FinishableSparkJobStatus,
        spec: Mapping[str, Any] | None,
        *,
        generation: int,
        decided_on: int,
        now: datetime,
    ) -> tuple[Decision, Expiry | None]:
        """The decision with the job's deadline in it, and that deadline (None: kept)."""
        found = expiry(time_to_live(spec), self.defaults, decision.status, now)
        seen = generation if decided_on != generation else None
        return settle(decision, before, found, spec, seen_generation=seen), found

    async def expire(
        self, found: Expiry, phase: Phase, resource_version: str | None, *, recording: bool
    ) -> float | None:
        """Before the deadline, the seconds until it; after it, ``TTLExpired`` and a DELETE of
        the job at ``resource_version`` (:class:`~finishable.controller.apicalls.Conflict` when
        the job changed since), or the seconds until the next try while its newest savepoint is
        still being recorded (``recording``). None once the job is deleted."""
        if not found.expired:
            return found.remaining.total_seconds()
        key = f"{self.job.namespace}/{self.job.name}"
        if recording:
            log.info("%s: expired; deleted once its newest savepoint is recorded", key)
            return RECORDING_RETRY_SECONDS
        if self.told != found.at:
            message = f"{found.setting} passed at {stamp(found.at)}: deleting the job"
            self.post(Event("Normal", "TTLExpired", message))
            self.told = found.at
        preconditions = {"uid": self.job.uid}
        if resource_version is not None:
            preconditions["resourceVersion"] = resource_version
        deleted = await self.kube.delete(
            PLURAL,
            self.job.name,
            namespace=self.job.namespace,
            api_version=f"{API_GROUP}/{API_VERSION}",
            preconditions=preconditions,
        )
        if deleted:
            self.metrics.job_expired((self.job.namespace, self.job.name), phase)
            log.info("%s: %s passed; the job is deleted", key, found.setting)
        return None
