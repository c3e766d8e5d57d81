"""The conventions every object of a job follows, whoever creates it: labels and the owner.

The operator builds the job's children (``controller/job/builders.py``) and the driver creates
its report and checkpoint ConfigMaps; both label them ``finishable.dev/job`` and
``finishable.dev/component`` and make the custom resource their controlling owner, so the garbage
collector removes them with the job. Kept here, below both, so that neither has to import the other.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from finishable.api.models import API_GROUP, API_VERSION, KIND

LABEL_JOB = "finishable.dev/job"
LABEL_DELETED_JOB = "finishable.dev/deleted-job"
"""On the snapshots a deleted job left behind, in place of its ``LABEL_JOB``."""
LABEL_COMPONENT = "finishable.dev/component"
LABEL_ATTEMPT = "finishable.dev/attempt"
LABEL_STANDBY = "finishable.dev/standby"
"""On a standby driver pod (``spec.recovery.standby``): ``"true"``."""
ANNOTATION_SPEC_REVISION = "finishable.dev/spec-revision"
"""On a standby driver pod: the spec revision it was built from (a takeover needs the current)."""
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "finishable-spark-operator"

_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")


@dataclass(frozen=True)
class JobRef:
    """The custom resource the children belong to."""

    name: str
    namespace: str
    uid: str


def job_label_value(job: str) -> str:
    """The job name as a label value (<= 63 characters; longer names are shortened by hash)."""
    if len(job) <= 63 and _LABEL_VALUE.fullmatch(job):
        return job
    digest = hashlib.sha256(job.encode()).hexdigest()[:10]
    return f"{job[:52].rstrip('-.')}-{digest}"


def labels(job: str, component: str | None = None, attempt: int | None = None) -> dict[str, str]:
    result = {LABEL_JOB: job_label_value(job), LABEL_MANAGED_BY: MANAGER}
    if component is not None:
        result[LABEL_COMPONENT] = component
    if attempt is not None:
        result[LABEL_ATTEMPT] = str(attempt)
    return result


def selector(job: str, component: str) -> dict[str, str]:
    """The labels that pick a job's pods of one component (without the attempt)."""
    return {LABEL_JOB: job_label_value(job), LABEL_COMPONENT: component}


def owner_reference(job: JobRef, *, block_owner_deletion: bool = True) -> dict[str, Any]:
    """The custom resource as the controlling owner: children go when the job goes.

    ``blockOwnerDeletion`` makes a foreground deletion of the job wait for the child. Where the
    OwnerReferencesPermissionEnforcement admission plugin runs (OpenShift's default), setting it
    needs ``update`` on ``finishablesparkjobs/finalizers``: the operator holds that (the chart
    grants it), a driver does not and need not, so the objects a driver creates (its state and
    checkpoint ConfigMaps) pass ``block_owner_deletion=False`` and are still collected with the job.
    """
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": KIND,
        "name": job.name,
        "uid": job.uid,
        "controller": True,
        "blockOwnerDeletion": block_owner_deletion,
    }
