"""FinishableSparkSnapshot objects: a job's completed savepoints as custom resources (pure).

The reconcile loop records each savepoint it sees complete (``status.savepoint`` changes) as a
snapshot in the job's namespace, owned by the job, and resolves ``spec.restoreFrom.snapshotRef``
to the location a snapshot holds. Everything here is pure: the loop does the API calls.

A snapshot's name is deterministic, so recording the same savepoint again (a retried step, a
restarted operator) creates nothing new: ``<job>-<kind>-<checkpoint id>-<hash>`` (kind
``savepoint`` or ``drain``), the hash (of the job's uid and the savepoint's location) telling
apart two savepoints of the same batch.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from finishable.api.control import is_departure
from finishable.api.models import (
    API_GROUP,
    API_VERSION,
    DesiredState,
    Phase,
    RequestAction,
    SavepointTrigger,
    dump,
)
from finishable.api.savepointspec import SavepointHistorySpec
from finishable.api.snapshot import (
    SNAPSHOT_KIND,
    FinishableSparkSnapshotSpec,
    FinishableSparkSnapshotStatus,
    SnapshotKind,
    SnapshotState,
)
from finishable.api.spec import FinishableSparkJobSpec
from finishable.api.status import ControlRequest, FinishableSparkJobStatus, SavepointStatus
from finishable.controller.naming import FINALIZER
from finishable.kube.objects import LABEL_JOB, JobRef, job_label_value, owner_reference

NAME_MAX_LENGTH = 63
HASH_LENGTH = 8
SNAPSHOT_API_VERSION = f"{API_GROUP}/{API_VERSION}"


class SnapshotUnusable(ValueError):
    """``spec.restoreFrom.snapshotRef`` names a snapshot that cannot be started from."""


def trigger_of(
    savepoint: SavepointStatus, request: ControlRequest | None, phase: Phase
) -> SavepointTrigger:
    """What asked for ``savepoint``: the request in flight that it answers, else what the job
    did (a drained savepoint ends a drain, a Suspended job stopped), else a manual savepoint.
    A departure savepoint says so in its request id."""
    if is_departure(savepoint.request_id):
        return SavepointTrigger.DEPARTURE  # the one no one sent: a driver's on its way out
    if request is not None and savepoint.request_id == request.id:
        if request.trigger is not None:
            return request.trigger
        if request.action is RequestAction.SAVEPOINT:
            return SavepointTrigger.MANUAL
        return SavepointTrigger.DRAIN if request.drain else SavepointTrigger.STOP
    if savepoint.drained:
        return SavepointTrigger.DRAIN
    if phase is Phase.SUSPENDED:
        return SavepointTrigger.STOP
    return SavepointTrigger.MANUAL


def snapshot_kind(savepoint: SavepointStatus) -> SnapshotKind:
    return SnapshotKind.DRAIN if savepoint.drained else SnapshotKind.SAVEPOINT


def snapshot_name(job: JobRef, savepoint: SavepointStatus) -> str:
    """``<job>-<kind>-<id>-<hash>``, a DNS label of at most 63 characters (the job's name is
    shortened when the rest needs the room). Only what the savepoint itself says goes into it
    (not the trigger, which a restarted operator may no longer know), so the same savepoint
    always gets the same name."""
    digest = hashlib.sha256(f"{job.uid}\n{savepoint.location}".encode()).hexdigest()
    kind = snapshot_kind(savepoint).value
    parts = [kind, *([str(savepoint.id)] if savepoint.id is not None else [])]
    suffix = "-" + "-".join([*parts, digest[:HASH_LENGTH]])
    prefix = job.name[: NAME_MAX_LENGTH - len(suffix)].rstrip("-")
    name = re.sub(r"[^a-z0-9-]", "-", (prefix + suffix).lower())
    return name.strip("-") or digest[:HASH_LENGTH]


def snapshot_object(
    job: JobRef,
    savepoint: SavepointStatus,
    trigger: SavepointTrigger,
    *,
    run: int | None = None,
    dispose_on_delete: bool = False,
) -> dict[str, Any]:
    """The snapshot of a completed ``savepoint`` of ``job``, status included (an API server
    ignores the status on create: write it through the status subresource after)."""
    status = FinishableSparkSnapshotStatus(
        state=SnapshotState.COMPLETED,
        message="savepoint completed",
        location=savepoint.location,
        kind=snapshot_kind(savepoint),
        trigger=trigger,
        checkpoint_id=savepoint.id,
        drained=savepoint.drained,
        size_bytes=savepoint.size_bytes,
        job_uid=job.uid,
        run=run,
        request_id=savepoint.request_id,
        time=savepoint.time,
    )
    return {
        "apiVersion": SNAPSHOT_API_VERSION,
        "kind": SNAPSHOT_KIND,
        "metadata": {
            "name": snapshot_name(job, savepoint),
            "namespace": job.namespace,
            "labels": {LABEL_JOB: job_label_value(job.name)},
            "ownerReferences": [owner_reference(job)],
            # With the finalizer from the start, a snapshot deleted at once is disposed too.
            **({"finalizers": [FINALIZER]} if dispose_on_delete else {}),
        },
        "spec": dump(
            FinishableSparkSnapshotSpec(job_name=job.name, dispose_on_delete=dispose_on_delete)
        ),
        "status": dump(status),
    }


def read_status(raw: Mapping[str, Any]) -> FinishableSparkSnapshotStatus:
    """A snapshot's status, skipping fields of a newer release (``ValidationError`` when what
    this release knows does not parse)."""
    known = {f.alias or n for n, f in FinishableSparkSnapshotStatus.model_fields.items()}
    return FinishableSparkSnapshotStatus.model_validate(
        {key: value for key, value in raw.items() if key in known}
    )


def restores_now(
    spec: FinishableSparkJobSpec, status: FinishableSparkJobStatus, generation: int
) -> bool:
    """Whether a driver may start from ``spec.restoreFrom.snapshotRef`` now: a new run, a
    changed Failed job, a resuming Suspended job without a savepoint of its own."""
    if spec.state is DesiredState.SUSPENDED:
        return False
    phase = status.phase
    return (
        phase is Phase.PENDING
        or (phase is Phase.FAILED and generation > status.observed_generation)
        or (phase is Phase.SUSPENDED and status.savepoint is None)
    )


def restore_location(name: str, snapshot: Mapping[str, Any] | None) -> str:
    """The location ``spec.restoreFrom.snapshotRef: name`` starts from; :class:`SnapshotUnusable`
    naming the field, the snapshot and what is wrong when there is none to start from."""
    field = "spec.restoreFrom.snapshotRef"
    if snapshot is None:
        raise SnapshotUnusable(
            f"{field}: the FinishableSparkSnapshot {name!r} does not exist in the job's namespace"
        )
    raw = snapshot.get("status") or {}
    try:
        status = read_status(raw)
    except ValidationError as error:
        raise SnapshotUnusable(
            f"{field}: the status of FinishableSparkSnapshot {name!r} cannot be read: "
            f"{error.errors()[0].get('msg', error)}"
        ) from None
    if not raw or status.state is not SnapshotState.COMPLETED:
        state = status.state.value if raw else "Pending (no status yet)"
        raise SnapshotUnusable(
            f"{field}: the FinishableSparkSnapshot {name!r} is {state}, not Completed"
            + (f": {status.message}" if raw and status.message else "")
        )
    if not status.location:
        raise SnapshotUnusable(
            f"{field}: the FinishableSparkSnapshot {name!r} is Completed but has no location"
        )
    return status.location


OPEN_STATES = frozenset({"", SnapshotState.PENDING.value, SnapshotState.IN_PROGRESS.value})


def is_requested(body: Mapping[str, Any]) -> bool:
    """A snapshot created by hand to ask for a savepoint: it names a job, no owner made it, and
    it is not done yet (no status, Pending or InProgress)."""
    meta = body.get("metadata") or {}
    job_name = (body.get("spec") or {}).get("jobName")
    state = str((body.get("status") or {}).get("state") or "")
    return bool(job_name) and not meta.get("ownerReferences") and state in OPEN_STATES


def job_and_state(body: Mapping[str, Any]) -> tuple[str | None, SnapshotState]:
    """Whose snapshot it is (``spec.jobName``, which the operator sets too, else its job label)
    and its state (Pending without a status, or with a state this release does not know)."""
    labels = (body.get("metadata") or {}).get("labels") or {}
    job = (body.get("spec") or {}).get("jobName") or labels.get(LABEL_JOB)
    try:
        state = SnapshotState((body.get("status") or {}).get("state") or SnapshotState.PENDING)
    except ValueError:
        state = SnapshotState.PENDING
    return (str(job) if job else None), state


def completed_status(
    job: JobRef,
    savepoint: SavepointStatus,
    *,
    run: int | None,
    trigger_nonce: int | None,
) -> dict[str, Any]:
    """The status that fills in a snapshot created by hand once its savepoint completed."""
    body = snapshot_object(job, savepoint, SavepointTrigger.MANUAL, run=run)
    status: dict[str, Any] = body["status"]
    if trigger_nonce is not None:
        status["triggerNonce"] = trigger_nonce
    return status


def holders(jobs: Iterable[Mapping[str, Any]], name: str, location: str) -> list[str]:
    """The jobs (of the snapshot's namespace) that may still start a driver from the savepoint
    at ``location``, which snapshot ``name`` records: its files must not be disposed of.

    A job holds it while it is not Finished and its spec restores from it (by location or by
    snapshot name), its current run started from it (a recovered attempt falls back to it), or
    it is the job's newest savepoint (what a resume or a restart after a failure starts from).
    """
    held = []
    for job in jobs:
        status = job.get("status") or {}
        if status.get("phase") == Phase.FINISHED.value:
            continue
        restore = (job.get("spec") or {}).get("restoreFrom") or {}
        newest = (status.get("savepoint") or {}).get("location")
        if location in (restore.get("savepoint"), status.get("restoreFrom"), newest) or (
            name and restore.get("snapshotRef") == name
        ):
            held.append(str((job.get("metadata") or {}).get("name")))
    return sorted(held)


AUTOMATIC_TRIGGERS = frozenset(
    {
        SavepointTrigger.PERIODIC,
        SavepointTrigger.STOP,
        SavepointTrigger.DRAIN,
        SavepointTrigger.UPGRADE,
        SavepointTrigger.RESCALE,  # one per rescale: an autoscaled job would pile them up
    }
)


def _completed(body: Mapping[str, Any]) -> FinishableSparkSnapshotStatus | None:
    raw = body.get("status") or {}
    if raw.get("state") != SnapshotState.COMPLETED.value:
        return None
    try:
        return read_status(raw)
    except ValidationError:
        return None


def to_trim(
    job: JobRef,
    snapshots: Iterable[Mapping[str, Any]],
    jobs: Iterable[Mapping[str, Any]],
    history: SavepointHistorySpec,
    now: datetime,
) -> list[str]:
    """The names of ``job``'s snapshots that ``spec.savepoints.history`` lets go, oldest first.

    Only what the operator took by itself (periodic, stop, drain, upgrade) of this job (its uid:
    not an earlier job of the same name) counts and goes; manual snapshots are the user's. The
    newest snapshot the job can resume from (completed, not drained) stays whatever its trigger
    and age, and so does every snapshot a job holds (:func:`holders`).
    """
    if history.max_count is None and history.max_age is None:
        return []
    ours = []
    for body in snapshots:
        status = _completed(body)
        if status is not None and status.job_uid == job.uid:
            name = str((body.get("metadata") or {}).get("name"))
            ours.append((status.time or datetime.min.replace(tzinfo=now.tzinfo), name, status))
    ours.sort(key=lambda entry: entry[:2], reverse=True)
    resumable = next((name for _, name, status in ours if not status.drained), None)
    automatic = [entry for entry in ours if entry[2].trigger in AUTOMATIC_TRIGGERS]
    jobs = list(jobs)
    trimmed = []
    for index, (time, name, status) in enumerate(automatic):
        too_many = history.max_count is not None and index >= history.max_count
        too_old = history.max_age is not None and now - time > history.max_age
        if (too_many or too_old) and name != resumable and not holders(jobs, name, status.location):
            trimmed.append(name)
    return trimmed[::-1]
