"""Snapshots created by hand: a FinishableSparkSnapshot with ``spec.jobName`` and no status asks
for a savepoint of that running job.

The operator answers as a user bumping ``spec.savepointTriggerNonce`` would: it sets the job's
nonce one higher (so the phase machine sends the savepoint request as for any other nonce) and
marks the snapshot ``InProgress`` with that ``triggerNonce``. When the savepoint completes the
snapshot is filled in (``Completed``, its location and the rest) instead of a second, generated
snapshot being created; when the job acted on the nonce without producing a savepoint (the
driver refused or timed out) it is ``Failed``, with the job's reason. A snapshot asked of a job
that has ended is ``Failed`` at once; one asked of a job that is not running yet waits; one
open when its job is deleted is ``Abandoned``.

kopf keeps the open requests in an index (:func:`finishable.controller.handlers`), which may lag
behind the writes made here: what this loop already did is remembered, so one request never
bumps the nonce twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from finishable.api.models import (
    API_GROUP,
    API_VERSION,
    PLURAL,
    DesiredState,
    Phase,
    SavepointTrigger,
)
from finishable.api.snapshot import SNAPSHOT_PLURAL, SnapshotState
from finishable.api.spec import FinishableSparkJobSpec
from finishable.api.status import FinishableSparkJobStatus, SavepointStatus
from finishable.controller.apicalls import MERGE_PATCH, Kube
from finishable.controller.snapshot import objects as snapshots
from finishable.kube.api import KubeApiError
from finishable.kube.objects import JobRef
from finishable.lifecycle.decisions import TERMINAL_PHASES
from finishable.state.errors import BackendError

log = logging.getLogger(__name__)

Lister = Callable[[], list[Mapping[str, Any]]]
"""The open requests for this job, as kopf's index holds them (name and status)."""


class SnapshotRequests:
    """One job's snapshots created by hand, served by its reconcile loop."""

    def __init__(self, kube: Kube, job: JobRef, listed: Lister | None = None) -> None:
        self.kube = kube
        self.job = job
        self.listed: Lister = listed or list
        self._nonces: dict[str, int] = {}  # name → the nonce this loop set for it
        self._done: set[str] = set()

    def _open(self) -> list[tuple[str, str, int | None]]:
        """(name, state, trigger nonce) of each request not answered yet."""
        found = []
        for item in self.listed():
            name = str(item.get("name"))
            if name in self._done:
                continue
            status = item.get("status") or {}
            nonce = self._nonces.get(name, status.get("triggerNonce"))
            state = str(status.get("state") or SnapshotState.PENDING.value)
            if name in self._nonces:
                state = SnapshotState.IN_PROGRESS.value
            found.append((name, state, int(nonce) if nonce is not None else None))
        return found

    async def fill(
        self,
        savepoint: SavepointStatus,
        status: FinishableSparkJobStatus,
        trigger: SavepointTrigger,
    ) -> bool:
        """Fill in the requests the nonce of this completed manual savepoint answers; True
        when there were any (then no generated snapshot is created for it)."""
        filled = False
        if trigger is not SavepointTrigger.MANUAL:
            return False
        for name, state, nonce in self._open():
            if state != SnapshotState.IN_PROGRESS.value or nonce is None:
                continue
            if nonce > status.savepoint_trigger_nonce:
                continue
            body = snapshots.completed_status(
                self.job, savepoint, run=status.run, trigger_nonce=nonce
            )
            await self._write(name, body)
            log.info("%s/%s: snapshot %s completed", self.job.namespace, self.job.name, name)
            filled = True
        return filled

    async def serve(
        self,
        spec: FinishableSparkJobSpec,
        status: FinishableSparkJobStatus,
        *,
        recording: bool,
    ) -> None:
        """Start what is Pending, fail what cannot or did not produce a savepoint.
        ``recording``: a completed savepoint is still to be recorded (nothing is failed yet).
        An API failure is logged and tried again on the next step; it never holds the job up."""
        try:
            await self._serve(spec, status, recording=recording)
        except BackendError as error:
            log.warning(
                "%s/%s: snapshots created by hand not served yet: %s",
                self.job.namespace,
                self.job.name,
                error,
            )

    async def _serve(
        self,
        spec: FinishableSparkJobSpec,
        status: FinishableSparkJobStatus,
        *,
        recording: bool,
    ) -> None:
        failed = (c.message for c in status.conditions if c.reason == "SavepointFailed")
        message = next(failed, "")
        bumped: int | None = None
        for name, state, nonce in self._open():
            if state == SnapshotState.PENDING.value:
                if status.phase in TERMINAL_PHASES:
                    await self._write(
                        name,
                        {
                            "state": SnapshotState.FAILED.value,
                            "message": f"the job is {status.phase.value}: it takes no savepoint",
                            "jobUid": self.job.uid,
                        },
                    )
                elif status.phase is Phase.RUNNING and spec.state is DesiredState.RUNNING:
                    if bumped is None:
                        bumped = max(spec.savepoint_trigger_nonce, status.savepoint_trigger_nonce)
                        bumped += 1
                        await self._bump(bumped)
                    self._nonces[name] = bumped
                    await self._write(
                        name,
                        {
                            "state": SnapshotState.IN_PROGRESS.value,
                            "message": f"savepoint requested (spec.savepointTriggerNonce {bumped})",
                            "jobUid": self.job.uid,
                            "triggerNonce": bumped,
                            "trigger": "manual",
                        },
                    )
            elif (
                state == SnapshotState.IN_PROGRESS.value
                and nonce is not None
                and status.savepoint_trigger_nonce >= nonce
                and status.pending_request is None
                and not recording
            ):
                await self._write(
                    name,
                    {
                        "state": SnapshotState.FAILED.value,
                        "message": message or "the job took no savepoint for this request",
                        "jobUid": self.job.uid,
                    },
                )

    async def abandon(self, reason: str) -> int:
        """End every open request ``Abandoned``, saying why (its job is being deleted: no
        savepoint will answer it); returns how many."""
        opened = self._open()
        for name, _, _ in opened:
            abandoned = {"state": SnapshotState.ABANDONED.value, "message": reason}
            await self._write(name, {**abandoned, "jobUid": self.job.uid})
        return len(opened)

    async def _bump(self, nonce: int) -> None:
        path = self.kube.api.path(
            PLURAL,
            self.job.name,
            namespace=self.job.namespace,
            api_version=f"{API_GROUP}/{API_VERSION}",
        )
        body = {"spec": {"savepointTriggerNonce": nonce}}
        response = await self.kube.request("PATCH", path, body=body, content_type=MERGE_PATCH)
        if response.status != 200:
            raise KubeApiError(
                f"cannot set spec.savepointTriggerNonce of {self.job.name}", response
            )
        log.info(
            "%s/%s: spec.savepointTriggerNonce set to %d for a snapshot created by hand",
            self.job.namespace,
            self.job.name,
            nonce,
        )

    async def _write(self, name: str, status: dict[str, Any]) -> None:
        written = await self.kube.patch_status(
            snapshots.SNAPSHOT_API_VERSION, SNAPSHOT_PLURAL, name, self.job.namespace, status
        )
        if written is None or status["state"] != SnapshotState.IN_PROGRESS.value:
            self._done.add(name)
            self._nonces.pop(name, None)
