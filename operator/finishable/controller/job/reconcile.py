"""One job's reconcile loop: observe, ask the phase machine, act, write the status.

This is :class:`finishable.local.runner.LocalRunner`'s loop with a pod instead of a child
process. Each job gets one loop (a kopf daemon), so one task at a time decides for a job and the
status has one writer. The loop reads the custom resource from kopf's live body, the driver pods
and the driver's report from kopf indexes (so a reconcile costs no reads), keeps the status it
last wrote (a watch event of its own write may arrive later than the next wake-up), and sleeps
until something about the job changes, the phase machine asks to be called again, or the resync
interval passes.

The status is written first, conditionally on the resourceVersion the decision was made on
(:mod:`finishable.controller.status`), and the decision's actions run only once it is stored: a
loop that lost the race (the job changed, or a second operator wrote it) reads the job again and
decides again instead of acting. Every action is idempotent and the machine is level-based (a
driver pod that is missing is asked for again), so an action that fails after the write is done
on a later step; a control request in flight is sent again when a loop starts. A Finished or
Failed job whose time to live ended is deleted the same way: decided, stored, then deleted
(:mod:`finishable.controller.job.expiry`).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError

from finishable.api.models import (
    API_GROUP,
    API_VERSION,
    JOB_NAME_MAX_LENGTH,
    PLURAL,
    DepartureReason,
    JobMode,
    Phase,
    SavepointTrigger,
    is_valid_job_name,
)
from finishable.api.savepointspec import SavepointsSpec
from finishable.api.spec import FinishableSparkJobSpec
from finishable.api.status import ControlRequest, FinishableSparkJobStatus, SavepointStatus
from finishable.api.validation import InvalidManifest, parse_spec
from finishable.controller import naming
from finishable.controller.apicalls import Conflict, Kube
from finishable.controller.job import upgradecheck
from finishable.controller.job.children import JobChildren
from finishable.controller.job.driverconf import with_operator_defaults
from finishable.controller.job.expiry import Expirer
from finishable.controller.job.observe import (
    DriverPod,
    current_driver,
    parse_report,
    refine_departure,
)
from finishable.controller.metrics import JobKey, Metrics
from finishable.controller.snapshot import objects as snapshots
from finishable.controller.snapshot import store as snapshotstore
from finishable.controller.snapshot.requests import SnapshotRequests
from finishable.controller.status import EventPoster, StatusWriter
from finishable.kube.api import KubeApiError
from finishable.kube.objects import (
    JobRef,
    owner_reference,
)
from finishable.lifecycle.decisions import (
    Action,
    ActionKind,
    Decision,
    Event,
    Observation,
    PodPhase,
)
from finishable.lifecycle.dispatch import dispatch
from finishable.lifecycle.phases import next_status
from finishable.lifecycle.stopping import request_deadline
from finishable.lifecycle.ttl import TimeToLive
from finishable.state.control import ConfigMapControlChannel
from finishable.state.errors import BackendError

log = logging.getLogger(__name__)


class StatusUnreadable(ValueError):
    """The stored status does not parse: the operator cannot know where the job is."""


def read_spec(
    name: str, spec: Mapping[str, Any] | None
) -> tuple[FinishableSparkJobSpec | None, tuple[str, ...]]:
    """The spec, or the problems (each naming its field) that keep it from ever running."""
    problems: list[str] = []
    if not is_valid_job_name(name):
        problems.append(
            f"metadata.name: {name!r} is not a valid job name: use at most "
            f"{JOB_NAME_MAX_LENGTH} lowercase letters, digits and '-', starting with a letter"
        )
    try:
        parsed = parse_spec(spec or {})
    except InvalidManifest as error:
        problems += [str(problem) for problem in error.problems]
        return None, tuple(problems)
    return (None, tuple(problems)) if problems else (parsed, ())


def read_status(raw: Mapping[str, Any] | None) -> FinishableSparkJobStatus:
    """The stored status; fields other writers left (none should) are ignored."""
    known = {f.alias or n for n, f in FinishableSparkJobStatus.model_fields.items()}
    try:
        return FinishableSparkJobStatus.model_validate(
            {key: value for key, value in (raw or {}).items() if key in known}
        )
    except ValidationError as error:
        raise StatusUnreadable(f"the stored status cannot be read: {error}") from None


# -- the loop -------------------------------------------------------------------------------------


Observer = Callable[[], tuple[list[DriverPod], str | None]]
"""The job's driver pods and the raw text of its report, as currently indexed."""


@dataclass
class Controller:
    """What every job's loop shares: the API, the writer, metrics, and the wake-up calls."""

    kube: Kube
    metrics: Metrics
    resync: float = 60.0
    spark_master: str = naming.KUBERNETES_MASTER
    partition_storage: str | None = None
    """The default partition storage of Batch jobs (``finishable operator``'s option)."""
    ttl_defaults: TimeToLive = field(default_factory=TimeToLive)
    """How long Finished and Failed jobs are kept when their spec says nothing."""
    wakers: dict[JobKey, asyncio.Event] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.writer = StatusWriter(self.kube, self.metrics)

    def wake(self, key: JobKey) -> None:
        """Something about the job changed: run its loop now."""
        waker = self.wakers.get(key)
        if waker is not None:
            waker.set()


class JobLoop:
    """The reconcile loop of one job (see the module docstring)."""

    def __init__(
        self,
        controller: Controller,
        body: Mapping[str, Any],
        observe: Observer,
        post: EventPoster,
    ) -> None:
        meta = body["metadata"]
        self.controller = controller
        self.kube = controller.kube
        self.body = body
        self.job = JobRef(name=meta["name"], namespace=meta["namespace"], uid=meta["uid"])
        self.key: JobKey = (self.job.namespace, self.job.name)
        self.observe = observe
        self.post = post
        self.stored: dict[str, Any] = copy.deepcopy(dict(body.get("status") or {}))
        self.status = read_status(self.stored)
        self.resource_version: str | None = meta.get("resourceVersion")
        self._unperformed: list[Action] = []
        if self.status.pending_request is not None:  # it may have been lost with a loop
            request = self.status.pending_request
            self._unperformed.append(Action(ActionKind.SEND_REQUEST, request=request))
        self.channel = ConfigMapControlChannel(
            self.kube.api,
            self.job.name,
            namespace=self.job.namespace,
            owner_references=[owner_reference(self.job)],
        )
        self.children = JobChildren(
            self.kube, self.job, self.channel, master=controller.spark_master
        )
        # The savepoint to record as a FinishableSparkSnapshot, with what asked for it: the
        # stored one when the loop starts (a create that answers 409 is a success), then each
        # new one.
        self._unrecorded: tuple[SavepointStatus, SavepointTrigger] | None = None
        if self.status.savepoint is not None:
            self._unrecorded = (
                self.status.savepoint,
                snapshots.trigger_of(
                    self.status.savepoint, self.status.pending_request, self.status.phase
                ),
            )
        self.requests = SnapshotRequests(self.kube, self.job)
        self.expirer = Expirer(
            self.kube, self.job, controller.ttl_defaults, controller.metrics, post
        )
        self._departures: dict[str, DepartureReason] = {}
        """Why each leaving driver pod leaves, as first decided (its Node may change since)."""

    # -- the loop ---------------------------------------------------------------------------

    async def run(self, stopped: Any) -> None:
        """Reconcile until kopf stops the daemon (the job is deleted or the operator exits)."""
        waker = self.controller.wakers.setdefault(self.key, asyncio.Event())
        self.controller.metrics.track(self.key, self.status)
        stop = asyncio.ensure_future(stopped.wait())
        try:
            while not stopped:
                waker.clear()
                step = asyncio.ensure_future(self.step())
                await asyncio.wait({step, stop}, return_when=asyncio.FIRST_COMPLETED)
                if not step.done():
                    # Deleted (or the operator stops): leave mid-step, as kopf's cancellation
                    # would, while the deletion handler removes the children the step creates.
                    step.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await step
                    return
                requeue = step.result()
                delay = self.controller.resync if requeue is None else requeue
                woken = asyncio.ensure_future(waker.wait())
                await asyncio.wait(
                    {woken, stop},
                    timeout=min(delay, self.controller.resync),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                woken.cancel()
        finally:
            stop.cancel()
            if self.controller.wakers.get(self.key) is waker:
                del self.controller.wakers[self.key]

    async def step(self) -> float | None:
        """One reconcile; returns when the machine wants to be called again (seconds)."""
        meta = self.body["metadata"]
        raw_spec = self.body.get("spec")
        generation = int(meta.get("generation") or 1)
        decided_on = self.expirer.generation(self.status, raw_spec, generation)
        spec, problems = read_spec(self.job.name, raw_spec)
        if spec is not None:
            spec = with_operator_defaults(spec, self.controller.partition_storage)
            spec = await self.resolve_snapshot_ref(spec, decided_on)
        watched, report_text = self.observe()
        now = datetime.now(UTC)
        pods = self.children.writes.overlay(watched, now)
        current = current_driver(pods, self.status.attempt)
        observation = Observation(
            now=now,
            generation=decided_on,
            driver_pod=current.phase if current else PodPhase.ABSENT,
            driver_message=current.message if current else "",
            report=parse_report(report_text),
            spec_problems=problems,
            upgrade_check=await upgradecheck.observe(self.kube, self.job, self.status),
            driver_departure=await self.departure_of(current),
            driver_node=current.node if current else "",
        )
        decision = next_status(self.status, spec, observation)
        decision, expiring = self.expirer.settle(
            decision, self.status, raw_spec, generation=generation, decided_on=decided_on, now=now
        )
        batch = spec is not None and spec.mode is JobMode.BATCH
        replicas = decision.status.shuffle_replicas or (
            spec.effective_shuffle.replicas if spec is not None and batch else 0
        )
        saved = decision.status.savepoint
        if saved is not None and saved != self.status.savepoint and saved.location:
            trigger = snapshots.trigger_of(
                saved, self.status.pending_request, decision.status.phase
            )
            self._unrecorded = (saved, trigger)
            # Before the status says so: a job seen Suspended has its stop's snapshot listed.
            await self.record_snapshot(spec, decision.status)
        try:
            written = await self.controller.writer.write(
                self.job,
                self.stored,
                self.status,
                decision,
                now=now,
                shuffle_replicas=replicas,
                post=self.post,
                resource_version=self.resource_version,
                request_deadline=request_deadline(decision.status, spec),
            )
        except Conflict:
            log.info("%s: the job changed since it was read; deciding again", self.key)
            await self.refresh()
            return 0.0
        if written is None:
            return None
        self.stored, self.resource_version = written
        self.status = decision.status
        requeue = await self.perform(decision, spec, pods)
        await self.record_snapshot(spec, self.status)  # what failed before the write, again
        if spec is not None:
            await self.requests.serve(spec, self.status, recording=self._unrecorded is not None)
        if expiring is not None and not meta.get("deletionTimestamp"):
            try:
                wait = await self.expirer.expire(
                    expiring,
                    self.status.phase,
                    self.resource_version,
                    recording=self._unrecorded is not None,
                )
            except Conflict:
                log.info("%s: the job changed since its expiry was decided", self.key)
                await self.refresh()
                return 0.0
            if wait is not None:
                requeue = wait if requeue is None else min(requeue, wait)
        return requeue

    async def departure_of(self, pod: DriverPod | None) -> DepartureReason | None:
        """Why Kubernetes asks the current driver pod to stop, when someone else than this
        operator deletes it; an eviction is told from a drain by the pod's Node (read once)."""
        if pod is None or pod.departure is None or pod.name in self.children.writes.ours:
            return None
        known = self._departures.get(pod.name)
        if known is not None:
            return known
        reason = pod.departure
        if reason is DepartureReason.EVICTED and pod.node:
            try:
                reason = refine_departure(reason, await self.kube.get_node(pod.node))
            except KubeApiError as error:  # a chart without the Node grant: an eviction
                log.warning("%s: cannot read node %s: %s", self.key, pod.node, error)
        self._departures[pod.name] = reason
        return reason

    async def refresh(self) -> None:
        """Read the job's status and resourceVersion as stored. The spec stays kopf's live body,
        which the watch brings up to date (and wakes the loop when it does)."""
        body = await self.kube.get(
            f"{API_GROUP}/{API_VERSION}", PLURAL, self.job.name, self.job.namespace
        )
        if body is None:
            return
        self.stored = copy.deepcopy(dict(body.get("status") or {}))
        self.status = read_status(self.stored)
        self.resource_version = body["metadata"].get("resourceVersion")

    # -- snapshots --------------------------------------------------------------------------

    async def resolve_snapshot_ref(
        self, spec: FinishableSparkJobSpec, generation: int
    ) -> FinishableSparkJobSpec:
        """``spec`` with ``restoreFrom.savepoint`` set to the location of the snapshot that
        ``restoreFrom.snapshotRef`` names, when the job may start a driver from it now."""
        ref = spec.restore_from.snapshot_ref
        if not ref or not snapshots.restores_now(spec, self.status, generation):
            return spec
        try:
            location = await snapshotstore.restore_location(self.kube, self.job.namespace, ref)
        except snapshots.SnapshotUnusable as error:
            self.post(Event("Warning", "SnapshotRefUnusable", str(error)))
            raise
        # The driver's configuration names the location only: a spec with both is invalid.
        restore = spec.restore_from.model_copy(update={"savepoint": location, "snapshot_ref": None})
        return spec.model_copy(update={"restore_from": restore})

    async def record_snapshot(
        self, spec: FinishableSparkJobSpec | None, status: FinishableSparkJobStatus
    ) -> None:
        """Record the newest completed savepoint as a FinishableSparkSnapshot (or fill in the
        ones created by hand that asked for it) for the job ``status`` describes; a failure is
        retried on the next step."""
        unrecorded = self._unrecorded
        if unrecorded is None or not unrecorded[0].location:
            self._unrecorded = None
            return
        savepoint, trigger = unrecorded
        savepoints = spec.savepoints if spec is not None else SavepointsSpec()
        try:
            if not await self.requests.fill(savepoint, status, trigger):
                await snapshotstore.record(
                    self.kube,
                    self.job,
                    savepoint,
                    trigger,
                    run=status.run,
                    dispose_on_delete=savepoints.dispose_on_delete,
                )
            # Trimmed as each one is recorded: a failure here records (409) and trims again.
            await snapshotstore.trim(self.kube, self.job, savepoints.history, self.post)
        except BackendError as error:
            missing = isinstance(error, KubeApiError) and error.status == 404
            log.warning("%s: savepoint %s not recorded: %s", self.key, savepoint.location, error)
            if not missing:  # 404: no snapshot CRD, nothing to retry (nor to delete after)
                return
        if self._unrecorded is unrecorded:
            self._unrecorded = None

    # -- actions ----------------------------------------------------------------------------

    async def perform(
        self, decision: Decision, spec: FinishableSparkJobSpec | None, pods: list[DriverPod]
    ) -> float | None:
        requeue: timedelta | None = None
        actions = [*self._unperformed, *decision.actions]
        self._unperformed = []
        status = decision.status
        sized = None if spec is None else spec.sized(status.executors)
        effects = None if sized is None else ClusterEffects(self, sized, pods, status.phase)
        for index, action in enumerate(actions):
            if action.kind is ActionKind.REQUEUE and action.after is not None:
                requeue = action.after if requeue is None else min(requeue, action.after)
            elif effects is not None:
                try:
                    await dispatch(action, effects)
                except BaseException:
                    # Stored as decided: what did not happen is done on the next step.
                    self._unperformed = [
                        a for a in actions[index:] if a.kind is not ActionKind.REQUEUE
                    ]
                    raise
        return None if requeue is None else max(requeue.total_seconds(), 0.05)


@dataclass(frozen=True)
class ClusterEffects:
    """The phase machine's actions done on the cluster (:mod:`finishable.lifecycle.dispatch`)."""

    loop: JobLoop
    spec: FinishableSparkJobSpec
    pods: list[DriverPod]
    phase: Phase

    async def start_driver(self, action: Action) -> None:
        loop = self.loop
        await loop.children.start_driver(
            self.spec, action, self.pods, shuffle_replicas=loop.status.shuffle_replicas
        )

    async def take_over(self, action: Action) -> None:
        await self.start_driver(action)  # the children promote the standby when one is alive

    async def start_standby(self, action: Action) -> None:
        loop = self.loop
        await loop.children.start_standby(self.spec, action, self.pods, current=loop.status.attempt)

    async def delete_standby(self, action: Action) -> None:
        await self.loop.children.delete_standbys(self.pods, after=action.attempt)

    async def send_request(self, request: ControlRequest) -> None:
        await self.loop.kube.run(self.loop.channel.send, request)
        log.info("%s: sent %s", self.loop.key, request.id)

    async def cancel_request(self, request: ControlRequest) -> None:
        await self.loop.kube.run(self.loop.channel.cancel, request.id)
        log.info("%s: cancelled %s", self.loop.key, request.id)

    async def delete_driver(self, action: Action) -> None:
        await self.loop.children.delete_drivers(
            [pod for pod in self.pods if pod.attempt <= action.attempt and not pod.deleting]
        )

    async def delete_executors(self, action: Action) -> None:
        await self.loop.children.delete_executors(up_to=action.attempt or None)

    async def delete_shuffle(self, action: Action) -> None:
        loop = self.loop
        await loop.children.delete_shuffle(
            self.spec, self.phase, shuffle_replicas=loop.status.shuffle_replicas
        )

    async def start_upgrade_check(self, action: Action) -> None:
        loop = self.loop
        check = loop.status.upgrade_check
        if check is None:  # decided with the check's status: nothing to start without it
            return
        await upgradecheck.start(
            loop.kube,
            loop.job,
            self.spec,
            action,
            generation=check.generation,
            master=loop.controller.spark_master,
        )

    async def delete_upgrade_check(self, action: Action) -> None:
        await upgradecheck.delete(self.loop.kube, self.loop.job)

    async def requeue(self, action: Action) -> None:
        """Nothing to do now: :meth:`JobLoop.perform` asks kopf to call again."""
