"""What the operator observes of a job's pods and its driver's report (pure parsing).

The kopf indexes hold a :class:`DriverPod` per driver pod (``driver_pod_of``) and the raw report;
a reconcile turns them into the phase machine's
:class:`~finishable.lifecycle.decisions.Observation`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from finishable.api.control import DriverReport
from finishable.api.models import DepartureReason
from finishable.kube.objects import ANNOTATION_SPEC_REVISION, LABEL_ATTEMPT, LABEL_STANDBY
from finishable.lifecycle.decisions import PodPhase
from finishable.state.control import decode

log = logging.getLogger(__name__)

LIVE_POD_PHASES = frozenset({PodPhase.PENDING, PodPhase.RUNNING})


@dataclass(frozen=True)
class DriverPod:
    """What the operator needs of one driver pod."""

    name: str
    attempt: int
    phase: PodPhase
    message: str = ""
    deleting: bool = False
    standby: bool = False
    """A standby driver's pod (``spec.recovery.standby``); promoted, it is its attempt's driver."""
    spec_revision: str = ""
    """A standby's: the spec revision it was built from."""
    departure: DepartureReason | None = None
    """Being deleted, and why Kubernetes asked it to stop (None: not being deleted)."""
    node: str = ""
    """The node it was scheduled to."""

    @property
    def alive(self) -> bool:
        return self.phase in LIVE_POD_PHASES and not self.deleting


def current_driver(pods: Iterable[DriverPod], attempt: int) -> DriverPod | None:
    """The driver pod of ``attempt``: its own pod, else the standby that took over as it. A
    standby being deleted is never the driver: one of an attempt that was started anew."""
    candidates = [p for p in pods if p.attempt == attempt and not (p.standby and p.deleting)]
    return min(candidates, key=lambda pod: pod.standby, default=None)


def attempt_of(pod: Mapping[str, Any]) -> int:
    """The driver attempt a pod belongs to, by its label (0 if it has none)."""
    try:
        return int(((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_ATTEMPT, "0"))
    except ValueError:
        return 0


def driver_pod_of(body: Mapping[str, Any]) -> DriverPod:
    """A pod as the phase machine sees it: its phase and, when it ended, why."""
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    attempt = attempt_of(body)
    try:
        phase = PodPhase(status.get("phase") or "Pending")
    except ValueError:  # "Unknown": the node is unreachable; the pod may well be alive
        phase = PodPhase.RUNNING
    message = str(status.get("message") or status.get("reason") or "")
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        waiting, terminated = state.get("waiting"), state.get("terminated")
        if waiting and waiting.get("reason") not in (None, "ContainerCreating"):
            # ImagePullBackOff, CreateContainerConfigError...: why the driver does not start
            message = ": ".join(filter(None, [waiting.get("reason"), waiting.get("message")]))
        if terminated and terminated.get("exitCode"):
            detail = terminated.get("message") or terminated.get("reason") or ""
            message = f"exit code {terminated['exitCode']}" + (f" ({detail})" if detail else "")
    return DriverPod(
        name=str(meta.get("name")),
        attempt=attempt,
        phase=phase,
        message=message,
        deleting=bool(meta.get("deletionTimestamp")),
        standby=(meta.get("labels") or {}).get(LABEL_STANDBY) == "true",
        spec_revision=str((meta.get("annotations") or {}).get(ANNOTATION_SPEC_REVISION, "")),
        departure=departure_of(body),
        node=str((body.get("spec") or {}).get("nodeName") or ""),
    )


DISRUPTION_REASONS = {
    "EvictionByEvictionAPI": DepartureReason.EVICTED,
    "TerminationByKubelet": DepartureReason.EVICTED,
    "PreemptionByScheduler": DepartureReason.PREEMPTED,
    "DeletionByTaintManager": DepartureReason.NODE_LOST,
}
"""The reasons of the ``DisruptionTarget`` condition the API server, the scheduler, the kubelet
and the taint manager set on a pod they are about to stop (Kubernetes 1.26+), and what they
mean to a job. ``DeletionByPodGC`` is not here: it deletes pods that have already ended."""


def departure_of(body: Mapping[str, Any]) -> DepartureReason | None:
    """Why a pod is being deleted (None when it is not): the ``DisruptionTarget`` condition's
    reason, else a deletion by hand. A drain is an eviction from a cordoned node; only the Node
    tells that (:func:`refine_departure`)."""
    if not (body.get("metadata") or {}).get("deletionTimestamp"):
        return None
    for condition in (body.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            return DISRUPTION_REASONS.get(str(condition.get("reason")), DepartureReason.EVICTED)
    return DepartureReason.POD_DELETED


def refine_departure(reason: DepartureReason, node: Mapping[str, Any] | None) -> DepartureReason:
    """An eviction from a node marked unschedulable is a drain (``kubectl drain`` cordons the
    node, then evicts its pods; so do managed node upgrades)."""
    cordoned = bool(((node or {}).get("spec") or {}).get("unschedulable"))
    return DepartureReason.NODE_DRAIN if reason is DepartureReason.EVICTED and cordoned else reason


WRITES_UNSEEN_FOR = timedelta(seconds=60)
"""How long a pod write the watch has not shown is trusted over the watch (then the watch wins:
a pod deleted by someone else before the watch showed it must not be awaited forever)."""


@dataclass
class OwnPodWrites:
    """The driver pods this operator created or deleted that its watch has not shown yet.

    A loop steps again as soon as its status write lands, often before the watch brings the pod
    it just created or deleted: deciding on that older list would create the pod again (a 409)
    or delete it again. Like the expectations of Kubernetes' own controllers, the operator's
    own writes overlay the watched list until the watch shows them.
    """

    created: dict[str, tuple[DriverPod, datetime]] = field(default_factory=dict)
    deleted: dict[str, datetime] = field(default_factory=dict)
    ours: set[str] = field(default_factory=set)
    """Every driver pod this process deleted: its deletion is no departure."""

    def create(self, pod: DriverPod, at: datetime) -> None:
        self.created[pod.name] = (pod, at)
        self.deleted.pop(pod.name, None)

    def delete(self, name: str, at: datetime) -> None:
        self.deleted[name] = at
        self.ours.add(name)
        self.created.pop(name, None)

    def overlay(self, watched: Iterable[DriverPod], now: datetime) -> list[DriverPod]:
        """``watched`` with the writes it does not show yet; forgets those it shows or that
        are older than :data:`WRITES_UNSEEN_FOR`."""
        pods = {pod.name: pod for pod in watched}
        for name, (pod, at) in list(self.created.items()):
            if name in pods or now - at > WRITES_UNSEEN_FOR:
                del self.created[name]
            else:
                pods[name] = pod
        for name, at in list(self.deleted.items()):
            seen = pods.get(name)
            if seen is None or seen.deleting or now - at > WRITES_UNSEEN_FOR:
                del self.deleted[name]
            else:
                pods[name] = replace(seen, deleting=True)
        return list(pods.values())


def parse_report(text: str | None) -> DriverReport | None:
    """The driver's report from ``<job>-state``; an unreadable one is logged and read as none."""
    if not text:
        return None
    try:
        return decode(DriverReport, text)
    except ValidationError as error:
        log.warning("ignoring an unreadable driver report: %s", error)
        return None
