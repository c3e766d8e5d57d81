"""May a pending upgrade stop the running job? The verdict of its check pod (pure).

Under ``upgradeMode`` savepoint or last-state, the new spec's program restores the running
job's state. Whether it can is only known by running it: the operator starts a check pod of the
new spec (``FINISHABLE_PREFLIGHT=1``: Spark in local mode, no query, no write to the job's
state) that compares the program's sources and sinks with the running job's newest checkpoint.
Only a pod that succeeds lets the stop happen; one that refuses, fails or gives no verdict in
``spec.upgradeCheck.timeout`` leaves the running job as it is, with the reason in a Degraded
condition. A refused revision is checked again when the spec is edited (a new generation).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from finishable.api.jobconfig import PREFLIGHT_REFUSED_EXIT_CODE
from finishable.api.models import JobMode, UpgradeCheckState, UpgradeMode
from finishable.api.spec import FinishableSparkJobSpec
from finishable.api.status import UpgradeCheckStatus
from finishable.lifecycle.decisions import CheckPod, Event, PodPhase

REFUSED_REASON = "UpgradeRefused"


def needs_check(spec: FinishableSparkJobSpec) -> bool:
    """Only a Streaming upgrade that restores state is checked (stateless restores nothing)."""
    return (
        spec.mode is JobMode.STREAMING
        and spec.upgrade_mode is not UpgradeMode.STATELESS
        and spec.upgrade_check.enabled
    )


@dataclass(frozen=True)
class CheckStep:
    """What one look at the check decides."""

    status: UpgradeCheckStatus
    passed: bool = False
    start: bool = False  # ask for the check pod (an idempotent create)
    delete: bool = False  # delete the job's check pods
    refused: str = ""  # why the upgrade is refused (a Degraded condition's message)
    event: Event | None = None
    look_again_in: timedelta | None = None


def check_upgrade(
    current: UpgradeCheckStatus | None,
    pod: CheckPod | None,
    spec: FinishableSparkJobSpec,
    *,
    now: datetime,
    generation: int,
) -> CheckStep:
    """The next step of the check of ``spec``'s revision, given the last one and its pod."""
    revision = spec.revision
    timeout = spec.upgrade_check.timeout
    retried = (
        current is not None
        and current.state is UpgradeCheckState.REFUSED
        and generation > current.generation
    )
    if current is None or current.revision != revision or retried:
        status = UpgradeCheckStatus(
            revision=revision,
            generation=generation,
            state=UpgradeCheckState.CHECKING,
            started_at=now,
        )
        started = Event(
            "Normal",
            "UpgradeCheckStarted",
            f"checking that spec revision {revision} can restore the running job's state "
            "before stopping it",
        )
        return CheckStep(
            status, start=True, delete=current is not None, event=started, look_again_in=timeout
        )
    if current.state is UpgradeCheckState.PASSED:
        return CheckStep(current, passed=True)
    if current.state is UpgradeCheckState.REFUSED:
        return CheckStep(current, refused=current.message)
    ours = pod if pod is not None and pod.generation == current.generation else None
    if ours is not None and ours.phase is PodPhase.SUCCEEDED:
        passed = current.model_copy(update={"state": UpgradeCheckState.PASSED})
        event = Event(
            "Normal",
            "UpgradeCheckPassed",
            f"spec revision {revision} can restore the running job's state",
        )
        return CheckStep(passed, passed=True, delete=True, event=event)
    deadline = current.started_at + timeout
    if ours is not None and ours.phase is PodPhase.FAILED:
        return _refuse(current, refusal(revision, ours), delete=False)
    if now >= deadline:
        waiting = f" ({ours.message})" if ours is not None and ours.message else ""
        why = (
            f"the check of spec revision {revision} gave no verdict within "
            f"spec.upgradeCheck.timeout ({timeout}){waiting}; the running job was not stopped. "
            "Edit the spec to check again, or set spec.upgradeCheck.enabled: false to upgrade "
            "without a check"
        )
        return _refuse(current, why, delete=True)
    return CheckStep(current, start=ours is None, look_again_in=deadline - now)


def refusal(revision: str, pod: CheckPod) -> str:
    """Why a failed check pod refuses the upgrade, and what to do."""
    detail = pod.message or "no reason given"
    if pod.exit_code == PREFLIGHT_REFUSED_EXIT_CODE:
        return (
            f"spec revision {revision} cannot restore the running job's state, so the job was "
            f"not stopped: {detail}. Set the previous program again, or use upgradeMode: "
            "stateless to start the new one from nothing"
        )
    return (
        f"the program of spec revision {revision} failed in its upgrade check (exit code "
        f"{pod.exit_code}: {detail}); the running job was not stopped. Its log: kubectl logs "
        f"{pod.name}. Fix the program and apply it again"
    )


def _refuse(current: UpgradeCheckStatus, why: str, *, delete: bool) -> CheckStep:
    refused = current.model_copy(update={"state": UpgradeCheckState.REFUSED, "message": why})
    return CheckStep(refused, refused=why, delete=delete)  # the Degraded condition posts it
