"""The upgrade check pod's objects, and finding it (lifecycle/upgradecheck.py decides when).

``<job>-check-<generation>`` is the driver pod of the new spec as the next attempt would get it
(image, program, service account, storage secret and volumes), with three differences: it runs
the program with ``FINISHABLE_PREFLIGHT=1`` (Spark in local mode, no query started, nothing
written to the job's state), it reads the new spec's job configuration from a ConfigMap of its
own (``<job>-config`` still describes the running driver's spec), and its verdict is its exit
code and termination message. It never fences the running driver: it claims no attempt.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from finishable.api.jobconfig import (
    ENDPOINT_HOST_ENV,
    PREFLIGHT_ENV,
    PREFLIGHT_VERDICT_PREFIX,
)
from finishable.api.models import UpgradeCheckState
from finishable.api.spec import FinishableSparkJobSpec
from finishable.api.status import FinishableSparkJobStatus
from finishable.controller.apicalls import Kube
from finishable.controller.job import builders
from finishable.controller.job.observe import driver_pod_of
from finishable.controller.naming import ANNOTATION_PREFIX, CONFIG_VOLUME, JOB_CONFIG_KEY
from finishable.kube.objects import LABEL_ATTEMPT, LABEL_COMPONENT, JobRef, selector
from finishable.lifecycle.decisions import Action, CheckPod

log = logging.getLogger(__name__)

UPGRADE_CHECK = "upgrade-check"  # the component label (and container name) of check pods
LABEL_GENERATION = f"{ANNOTATION_PREFIX}/generation"
ANNOTATION_REVISION = f"{ANNOTATION_PREFIX}/spec-revision"
# What only a running driver needs: Spark's cluster settings and the address executors use.
_DRIVER_ONLY_ENV = frozenset({"SPARK_CONF_DIR", "PYSPARK_SUBMIT_ARGS", ENDPOINT_HOST_ENV})


def check_name(job: str, generation: int) -> str:
    """One name per check: a check made again (a new generation) never meets the old pod."""
    return f"{job}-check-{generation}"


def check_config_map(
    job: JobRef, spec: FinishableSparkJobSpec, master: str, generation: int
) -> dict[str, Any]:
    """The new spec's job configuration, for the check pod only."""
    body = builders.config_map(job, spec, master)
    body["metadata"] = builders.metadata(job, check_name(job.name, generation), UPGRADE_CHECK)
    body["data"] = {JOB_CONFIG_KEY: body["data"][JOB_CONFIG_KEY]}
    return body


def check_pod(
    job: JobRef,
    spec: FinishableSparkJobSpec,
    *,
    generation: int,
    run: int,
    attempt: int,
    restore_from: str,
    master: str,
) -> dict[str, Any]:
    """The check pod of the spec ``spec`` made at ``generation``: it reads the state of ``run``
    started from ``restore_from`` (the running attempt's lineage)."""
    pod = builders.driver_pod(job, spec, attempt, restore_from, master, run=run)
    name = check_name(job.name, generation)
    meta = pod["metadata"]
    meta["name"] = name
    meta["labels"] = {
        **{key: value for key, value in meta["labels"].items() if key != LABEL_ATTEMPT},
        LABEL_COMPONENT: UPGRADE_CHECK,
        LABEL_GENERATION: str(generation),
    }
    meta["annotations"] = {**meta.get("annotations", {}), ANNOTATION_REVISION: spec.revision}
    container = pod["spec"]["containers"][0]
    container["name"] = UPGRADE_CHECK
    container.pop("ports", None)
    container["env"] = [
        *(item for item in container["env"] if item["name"] not in _DRIVER_ONLY_ENV),
        {"name": PREFLIGHT_ENV, "value": "1"},
    ]
    container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    for volume in pod["spec"]["volumes"]:
        if volume["name"] == CONFIG_VOLUME:
            volume["configMap"] = {
                "name": name,
                "items": [{"key": JOB_CONFIG_KEY, "path": JOB_CONFIG_KEY}],
            }
    pod["spec"]["activeDeadlineSeconds"] = max(int(spec.upgrade_check.timeout.total_seconds()), 1)
    return pod


def check_pod_of(body: Mapping[str, Any]) -> CheckPod:
    """A check pod as the phase machine sees it: its phase, exit code and verdict."""
    seen = driver_pod_of(body)
    meta = body.get("metadata") or {}
    try:
        generation = int((meta.get("labels") or {}).get(LABEL_GENERATION, "0"))
    except ValueError:
        generation = 0
    exit_code: int | None = None
    message = seen.message
    for container in (body.get("status") or {}).get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated") or {}
        if "exitCode" in terminated:
            exit_code = int(terminated["exitCode"])
            message = _verdict(str(terminated.get("message") or "")) or message
    return CheckPod(seen.name, generation, seen.phase, exit_code, message)


def _verdict(termination_message: str) -> str:
    """The check's reason: its termination message, or the last line of its log (a traceback's
    last line names the error), without the verdict's prefix."""
    lines = [line.strip() for line in termination_message.splitlines() if line.strip()]
    if not lines:
        return ""
    last = lines[-1]
    for outcome in ("passed: ", "refused: ", "failed: "):
        last = last.removeprefix(PREFLIGHT_VERDICT_PREFIX + outcome)
    return last


async def observe(kube: Kube, job: JobRef, status: FinishableSparkJobStatus) -> CheckPod | None:
    """The pod of the check under way, if there is one (one read, only while checking)."""
    check = status.upgrade_check
    if check is None or check.state is not UpgradeCheckState.CHECKING:
        return None
    body = await kube.get("v1", "pods", check_name(job.name, check.generation), job.namespace)
    return None if body is None else check_pod_of(body)


async def start(
    kube: Kube,
    job: JobRef,
    spec: FinishableSparkJobSpec,
    action: Action,
    *,
    generation: int,
    master: str,
) -> None:
    """Create the ConfigMap and pod of the check made at ``generation`` (idempotent), for the
    running attempt, run and restore point the action names."""
    await kube.upsert_configmap(check_config_map(job, spec, master, generation))
    body = check_pod(
        job,
        spec,
        generation=generation,
        run=action.run,
        attempt=action.attempt,
        restore_from=action.restore_from,
        master=master,
    )
    if await kube.create(body):
        log.info("%s/%s: created %s", job.namespace, job.name, builders.describe_child(body))


async def delete(kube: Kube, job: JobRef) -> None:
    """Delete every check pod of the job and their ConfigMaps."""
    terms = ",".join(f"{key}={value}" for key, value in selector(job.name, UPGRADE_CHECK).items())
    for plural in ("pods", "configmaps"):
        for body in await kube.list(plural, namespace=job.namespace, selector=terms):
            await kube.delete(plural, body["metadata"]["name"], namespace=job.namespace)
