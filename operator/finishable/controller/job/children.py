"""A job's children as the phase machine's actions say: driver pods (and standbys), executors,
shuffle pods and the objects a driver needs.

Each method is idempotent, as the loop in :mod:`finishable.controller.job.reconcile` requires: a
create that finds its object is a success, a delete that finds nothing is one too, and what an
action did not finish is done again on a later step. The objects themselves are built by
:mod:`finishable.controller.job.builders`; this is where they are created and deleted.
"""

from __future__ import annotations

import logging
import secrets
from datetime import UTC, datetime

from finishable.api.models import Phase
from finishable.api.spec import FinishableSparkJobSpec
from finishable.controller import naming
from finishable.controller.apicalls import Kube
from finishable.controller.job import builders
from finishable.controller.job.observe import DriverPod, OwnPodWrites, attempt_of, driver_pod_of
from finishable.controller.naming import KUBERNETES_MASTER
from finishable.kube.objects import (
    LABEL_ATTEMPT,
    LABEL_COMPONENT,
    LABEL_JOB,
    JobRef,
    job_label_value,
)
from finishable.lifecycle.decisions import TERMINAL_PHASES, Action, ActionKind
from finishable.state.control import ConfigMapControlChannel

log = logging.getLogger(__name__)


class JobChildren:
    """The children of one job (``channel``: its control channel, for a takeover's order)."""

    def __init__(
        self,
        kube: Kube,
        job: JobRef,
        channel: ConfigMapControlChannel,
        *,
        master: str = KUBERNETES_MASTER,
    ) -> None:
        self.kube = kube
        self.job = job
        self.key = (job.namespace, job.name)
        self.channel = channel
        self.master = master
        self.writes = OwnPodWrites()
        """The driver pods created and deleted here that the watch may not show yet."""
        self._children_for_attempt: int | None = None
        self._shuffle_deleted = False

    async def start_driver(
        self,
        spec: FinishableSparkJobSpec,
        action: Action,
        pods: list[DriverPod],
        *,
        shuffle_replicas: int | None,
    ) -> None:
        """Children first (RBAC, config, Services, shuffle), then the attempt's driver pod. A
        ``TAKE_OVER`` promotes the attempt's standby instead, if one is alive and was built
        from the spec as it is now."""
        attempt = action.attempt
        if action.kind is ActionKind.TAKE_OVER and await self._promote(spec, action, pods):
            return
        await self.delete_drivers(
            [
                pod
                for pod in pods
                if (pod.attempt < attempt or (pod.standby and pod.attempt == attempt)) and pod.alive
            ]
        )
        if self._children_for_attempt != attempt:
            token = secrets.token_urlsafe(32)
            for child in builders.static_children(
                self.job,
                spec,
                token,
                self.master,
                shuffle_replicas=shuffle_replicas,
            ):
                if child["metadata"]["name"] == naming.config_name(self.job.name):
                    await self.kube.upsert_configmap(child)  # follows spec edits between attempts
                elif await self.kube.create(child):
                    log.info("%s: created %s", self.key, builders.describe_child(child))
            if not spec.driver.disruption_budget:  # turned off since an earlier attempt
                await self.kube.delete(
                    "poddisruptionbudgets",
                    naming.driver_budget_name(self.job.name),
                    namespace=self.job.namespace,
                    api_version="policy/v1",
                )
            self._children_for_attempt = attempt
            self._shuffle_deleted = False
        if not any(pod.attempt == attempt and not pod.standby for pod in pods):
            await self.delete_executors(keep=attempt)  # an earlier attempt's, if any are left
            await self._create_driver_pod(spec, action, standby=False)

    async def _create_driver_pod(
        self, spec: FinishableSparkJobSpec, action: Action, *, standby: bool
    ) -> None:
        body = builders.driver_pod(
            self.job,
            spec,
            action.attempt,
            action.restore_from,
            self.master,
            run=action.run,
            standby=standby,
            predecessor_exited=action.predecessor_exited and not standby,
        )
        if await self.kube.create(body):
            log.info("%s: created %s", self.key, builders.describe_child(body))
        self.writes.create(driver_pod_of(body), datetime.now(UTC))  # created, or found (409)

    async def _promote(
        self, spec: FinishableSparkJobSpec, action: Action, pods: list[DriverPod]
    ) -> bool:
        """Order the standby of ``action.attempt`` to take over; False if there is none fit."""
        attempt = action.attempt
        standby = next(
            (
                pod
                for pod in pods
                if pod.standby
                and pod.attempt == attempt
                and pod.alive
                and pod.spec_revision == spec.revision
            ),
            None,
        )
        if standby is None:
            return False
        await self.kube.run(
            self.channel.take_over, attempt, predecessor_exited=action.predecessor_exited
        )
        log.info("%s: standby %s takes over as attempt %d", self.key, standby.name, attempt)
        await self.delete_drivers([pod for pod in pods if pod.attempt < attempt and pod.alive])
        return True

    async def start_standby(
        self, spec: FinishableSparkJobSpec, action: Action, pods: list[DriverPod], *, current: int
    ) -> None:
        """The standby of ``action.attempt``, and no other waiting (an older one was of a spec
        or an attempt that is gone); ``current`` is the job's attempt, which a promoted standby
        may be. A standby that ended is replaced: deleted now, created once it is gone."""
        attempt = action.attempt
        stale = [
            p
            for p in pods
            if p.standby and p.attempt > current and (p.attempt != attempt or not p.alive)
        ]
        await self.delete_drivers([pod for pod in stale if not pod.deleting])
        if not any(pod.standby and pod.attempt == attempt for pod in pods):
            await self._create_driver_pod(spec, action, standby=True)

    async def delete_standbys(self, pods: list[DriverPod], *, after: int) -> None:
        """Delete the standbys still waiting: those of attempts after ``after``, the job's."""
        await self.delete_drivers(
            [p for p in pods if p.standby and p.attempt > after and not p.deleting]
        )

    async def delete_drivers(self, pods: list[DriverPod]) -> None:
        """Delete driver pods and the executors of their attempts; first say that the operator
        stops them itself, so that they leave at SIGTERM without a savepoint of no use."""
        if pods:
            await self.kube.run(self.channel.release, max(pod.attempt for pod in pods))
        for pod in pods:
            await self.kube.delete("pods", pod.name, namespace=self.job.namespace)
            self.writes.delete(pod.name, datetime.now(UTC))
            deleted = await self._delete_executor_pods(f"{LABEL_ATTEMPT}={pod.attempt}")
            log.info("%s: deleted %s and %d executors", self.key, pod.name, deleted)

    async def delete_executors(self, *, keep: int | None = None, up_to: int | None = None) -> None:
        """Delete the job's executor pods: all but those of attempt ``keep``, or those of the
        attempts up to ``up_to`` (a standby's stay), or every one. Spark deletes its executors
        when it stops, and the garbage collector when their driver pod goes; this is for a
        driver that crashed and whose pod stays (for its logs)."""
        deleted = await self._delete_executor_pods(
            f"{LABEL_ATTEMPT}!={keep}" if keep is not None else None, up_to=up_to
        )
        if deleted:
            log.info("%s: deleted %d executor pods of ended attempts", self.key, deleted)

    async def _delete_executor_pods(self, term: str | None, *, up_to: int | None = None) -> int:
        selector = {LABEL_JOB: job_label_value(self.job.name), LABEL_COMPONENT: naming.EXECUTOR}
        terms = [f"{key}={value}" for key, value in selector.items()]
        executors = await self.kube.list(
            "pods", namespace=self.job.namespace, selector=",".join([*terms, *filter(None, [term])])
        )
        if up_to is not None:
            executors = [e for e in executors if attempt_of(e) <= up_to]
        for executor in executors:
            if not executor["metadata"].get("deletionTimestamp"):
                name = executor["metadata"]["name"]
                await self.kube.delete("pods", name, namespace=self.job.namespace)
        return len(executors)

    async def delete_shuffle(
        self, spec: FinishableSparkJobSpec, phase: Phase, *, shuffle_replicas: int | None
    ) -> None:
        """Delete the shuffle pods (their StatefulSet); a job that goes on gets fresh ones."""
        if self._shuffle_deleted:
            return
        name = naming.shuffle_name(self.job.name)
        if await self.kube.delete(
            "statefulsets", name, namespace=self.job.namespace, api_version="apps/v1"
        ):
            log.info("%s: deleted the shuffle pods (%s)", self.key, name)
        if phase in TERMINAL_PHASES:
            # The job ended: nothing of it left to protect, so drains may take the pods now.
            await self.kube.delete(
                "poddisruptionbudgets", name, namespace=self.job.namespace, api_version="policy/v1"
            )
            self._shuffle_deleted = True
        else:
            await self.kube.create(builders.shuffle_stateful_set(self.job, spec, shuffle_replicas))
