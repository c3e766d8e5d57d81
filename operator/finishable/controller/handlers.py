"""kopf handlers: thin glue between kopf's arguments and the reconcile loop.

* two indexes keep, per job, its driver pods and the driver's report (``<job>-state``), so a
  reconcile reads nothing from the API, and so a restarted operator knows both before any job's
  loop starts (kopf fills every index before it runs other handlers);
* a change of a job, of one of its driver pods, its upgrade check pod or its report wakes that
  job's loop;
* one daemon per job runs :class:`~finishable.controller.job.reconcile.JobLoop` (on creation, and
  for every existing job when the operator starts: kopf's resume);
* the deletion handler (behind the finalizer) stops the driver and removes the children;
* a snapshot with ``spec.disposeOnDelete`` gets a finalizer too: its deletion handler disposes
  of the savepoint's files first (:mod:`finishable.controller.snapshot.disposal`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from finishable.api.models import API_GROUP, API_VERSION, PLURAL
from finishable.api.snapshot import SNAPSHOT_PLURAL
from finishable.controller import naming
from finishable.controller.job import upgradecheck
from finishable.controller.job.deletion import PodsStopping, remove_children, retain_on_delete
from finishable.controller.job.observe import DriverPod, driver_pod_of
from finishable.controller.job.reconcile import Controller, JobLoop, StatusUnreadable
from finishable.controller.metrics import JobKey
from finishable.controller.settings import OperatorOptions, configure
from finishable.controller.snapshot import disposal
from finishable.controller.snapshot import objects as snapshots
from finishable.controller.snapshot.requests import SnapshotRequests
from finishable.kube.objects import LABEL_COMPONENT, LABEL_JOB, JobRef
from finishable.lifecycle.decisions import Event
from finishable.state.control import STATE_SUFFIX
from finishable.state.errors import BackendError

log = logging.getLogger(__name__)

registry = kopf.OperatorRegistry()
JOBS = (API_GROUP, API_VERSION, PLURAL)
SNAPSHOTS = (API_GROUP, API_VERSION, SNAPSHOT_PLURAL)
DRIVER_PODS: dict[str, Any] = {
    LABEL_COMPONENT: naming.DRIVER,
    LABEL_JOB: kopf.PRESENT,
}
CHECK_PODS: dict[str, Any] = {
    LABEL_COMPONENT: upgradecheck.UPGRADE_CHECK,
    LABEL_JOB: kopf.PRESENT,
}
CONTROL_MAPS: dict[str, Any] = {
    LABEL_COMPONENT: naming.CONTROL,
    LABEL_JOB: kopf.PRESENT,
}
RETRY_SECONDS = 10.0
STOPPING_SECONDS = 1.0  # a deleted job waits for its driver pod to stop: polled so often
STOPPING_WAIT_SECONDS = 60.0  # in one handler call; then retried as a temporary error
PEERING_GROUP = "kopf.dev/v1"


def _controller(memo: Any) -> Controller:
    controller: Controller = memo["controller"]
    return controller


def _key(namespace: str | None, job: str) -> JobKey:
    """Jobs, their pods and ConfigMaps are namespaced: kopf always passes a namespace here."""
    return (namespace or "", job)


def _is_report(name: str, **_: Any) -> bool:
    return name.endswith(STATE_SUFFIX)


# -- operator start ------------------------------------------------------------------------


@kopf.on.login(registry=registry)
def login(memo: Any, **_: Any) -> kopf.ConnectionInfo:
    """kopf connects with the same credentials as the operator's own client."""
    api = _controller(memo).kube.api
    configuration = api.configuration
    scheme: str | None = None
    token: str | None = None
    authorization = api.auth_headers().get("authorization")
    if authorization:
        scheme, _space, token = authorization.partition(" ")
    return kopf.ConnectionInfo(
        server=str(configuration.host),
        ca_path=configuration.ssl_ca_cert or None,
        insecure=not configuration.verify_ssl,
        scheme=scheme,
        token=token,
        certificate_path=configuration.cert_file or None,
        private_key_path=configuration.key_file or None,
        default_namespace=api.namespace,
    )


@kopf.on.startup(registry=registry)
async def start(settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
    """Apply the settings; peer with other replicas when the peering CRDs are installed."""
    options: OperatorOptions = memo["options"]
    configure(settings, options)
    if settings.peering.standalone:
        log.info("running standalone (--standalone): no other replica may run")
        return
    kube = _controller(memo).kube
    discovery = await kube.request("GET", f"/apis/{PEERING_GROUP}")
    if discovery.status != 200:
        settings.peering.standalone = True
        settings.peering.mandatory = False
        log.warning(
            "the kopf peering CRDs (kopf.dev) are not installed: running standalone, so a "
            "second replica would act on the same jobs; apply crds/kopf-peering.yaml to peer"
        )
        return
    body = {
        "apiVersion": PEERING_GROUP,
        "kind": "ClusterKopfPeering" if options.clusterwide else "KopfPeering",
        "metadata": {"name": options.peering},
    }
    if options.clusterwide:
        path = f"/apis/{PEERING_GROUP}/clusterkopfpeerings"
        created = await kube.request("POST", path, body=body)
        log.debug("cluster peering %s: HTTP %s", options.peering, created.status)
    for namespace in options.namespaces:
        path = kube.api.path("kopfpeerings", namespace=namespace, api_version=PEERING_GROUP)
        created = await kube.request("POST", path, body=body)
        log.debug("peering %s in %s: HTTP %s", options.peering, namespace, created.status)
    log.info("peering as %r with priority %d", settings.peering.name, settings.peering.priority)


@kopf.on.cleanup(registry=registry)
def stop(memo: Any, **_: Any) -> None:
    _controller(memo).kube.close()


@kopf.on.probe(id="jobs", registry=registry)
def jobs_probe(memo: Any, **_: Any) -> int:
    """The liveness endpoint reports how many job loops run."""
    return len(_controller(memo).wakers)


# -- what the loops read -------------------------------------------------------------------


@kopf.index("pods", labels=DRIVER_PODS, registry=registry)
def driver_pods(
    body: kopf.Body, namespace: str | None, labels: kopf.Labels, **_: Any
) -> dict[JobKey, DriverPod]:
    return {_key(namespace, labels[LABEL_JOB]): driver_pod_of(body)}


@kopf.index("configmaps", labels=CONTROL_MAPS, when=_is_report, registry=registry)
def driver_reports(
    body: kopf.Body, namespace: str | None, labels: kopf.Labels, **_: Any
) -> dict[JobKey, str]:
    data = body.get("data") or {}
    return {_key(namespace, labels[LABEL_JOB]): str(data.get("report") or "")}


@kopf.on.event("pods", labels=DRIVER_PODS, registry=registry)
def driver_pod_changed(namespace: str | None, labels: kopf.Labels, memo: Any, **_: Any) -> None:
    _controller(memo).wake(_key(namespace, labels[LABEL_JOB]))


@kopf.on.event("pods", labels=CHECK_PODS, registry=registry)
def upgrade_check_changed(namespace: str | None, labels: kopf.Labels, memo: Any, **_: Any) -> None:
    _controller(memo).wake(_key(namespace, labels[LABEL_JOB]))


@kopf.on.event("configmaps", labels=CONTROL_MAPS, when=_is_report, registry=registry)
def driver_report_changed(namespace: str | None, labels: kopf.Labels, memo: Any, **_: Any) -> None:
    _controller(memo).wake(_key(namespace, labels[LABEL_JOB]))


def _is_requested(body: kopf.Body, **_: Any) -> bool:
    return snapshots.is_requested(body)


@kopf.index(*SNAPSHOTS, when=_is_requested, registry=registry)
def requested_snapshots(
    body: kopf.Body, namespace: str | None, name: str, spec: kopf.Spec, **_: Any
) -> dict[JobKey, dict[str, Any]]:
    """Snapshots created by hand to ask for a savepoint (controller/snapshot/requests.py), by
    job."""
    status = dict(body.get("status") or {})
    return {_key(namespace, str(spec["jobName"])): {"name": name, "status": status}}


@kopf.on.event(*SNAPSHOTS, when=_is_requested, registry=registry)
def snapshot_requested(namespace: str | None, spec: kopf.Spec, memo: Any, **_: Any) -> None:
    _controller(memo).wake(_key(namespace, str(spec["jobName"])))


@kopf.on.event(*SNAPSHOTS, registry=registry)
def snapshot_changed(
    event: kopf.RawEvent, body: kopf.Body, namespace: str | None, name: str, memo: Any, **_: Any
) -> None:
    """Count snapshots per job and state for ``finishable_snapshots``."""
    job, state = snapshots.job_and_state(body)
    if job is None:
        return
    gone = event.get("type") == "DELETED"
    _controller(memo).metrics.snapshot_changed(str(namespace), name, job, None if gone else state)


@kopf.on.event(*JOBS, registry=registry)
def job_changed(namespace: str | None, name: str, memo: Any, **_: Any) -> None:
    _controller(memo).wake(_key(namespace, name))


# -- the job's loop and its end --------------------------------------------------------------


# A deleted job's loop is asked to leave by its stop flag for 5 s before kopf cancels it: the
# loop watches the flag and leaves at once, mid-step if need be (JobLoop.run), so that it creates
# no child the deletion handler is removing; without the backoff kopf cancels it itself and says
# so as a warning ("Daemon 'reconcile' is cancelled. Will escalate.") on every deletion.
@kopf.daemon(*JOBS, cancellation_backoff=5.0, cancellation_timeout=30.0, registry=registry)
async def reconcile(
    *,
    body: kopf.Body,
    namespace: str | None,
    name: str,
    stopped: kopf.DaemonStopped,
    memo: Any,
    **kwargs: Any,
) -> None:
    """Run the job's reconcile loop; API failures retry it after a pause."""
    key = _key(namespace, name)
    driver_pods: kopf.Index[JobKey, DriverPod] = kwargs["driver_pods"]
    driver_reports: kopf.Index[JobKey, str] = kwargs["driver_reports"]

    def observe() -> tuple[list[DriverPod], str | None]:
        reports = list(driver_reports.get(key, []))
        return list(driver_pods.get(key, [])), (reports[0] if reports else None)

    def post(event: Event) -> None:
        if event.type == "Normal":
            kopf.info(body, reason=event.reason, message=event.message)
        else:
            kopf.warn(body, reason=event.reason, message=event.message)

    requested: kopf.Index[JobKey, dict[str, Any]] = kwargs["requested_snapshots"]
    try:
        loop = JobLoop(_controller(memo), body, observe, post)
    except StatusUnreadable as error:
        raise kopf.PermanentError(str(error)) from None
    loop.requests.listed = lambda: list(requested.get(key, []))
    try:
        await loop.run(stopped)
    except BackendError as error:
        raise kopf.TemporaryError(f"{error}; retrying", delay=RETRY_SECONDS) from None
    except snapshots.SnapshotUnusable as error:
        raise kopf.TemporaryError(f"{error}; retrying", delay=RETRY_SECONDS) from None


@kopf.on.delete(*JOBS, registry=registry)
async def delete(
    *, body: kopf.Body, namespace: str | None, name: str, memo: Any, **kwargs: Any
) -> None:
    """Stop the driver, remove the children and the state ``retainOnDelete`` does not keep,
    and abandon the snapshots created by hand that still wait for a savepoint of the job."""
    controller = _controller(memo)
    job = JobRef(name=name, namespace=namespace or "", uid=str(body["metadata"]["uid"]))
    requested: kopf.Index[JobKey, dict[str, Any]] = kwargs["requested_snapshots"]
    key = _key(namespace, name)
    requests = SnapshotRequests(controller.kube, job, lambda: list(requested.get(key, [])))
    retain = retain_on_delete(body.get("spec") or {})
    waited = 0.0
    while True:
        try:
            deleted = await remove_children(controller.kube, job, retain=retain)
            break
        except PodsStopping as stopping:  # a stop in progress, not a failure: wait here quietly
            if waited >= STOPPING_WAIT_SECONDS:
                raise kopf.TemporaryError(str(stopping), delay=STOPPING_SECONDS) from None
            if not waited:
                log.info("%s/%s: %s", namespace, name, stopping)
        except BackendError as error:
            raise kopf.TemporaryError(f"{error}; retrying", delay=RETRY_SECONDS) from None
        await asyncio.sleep(STOPPING_SECONDS)
        waited += STOPPING_SECONDS
    try:
        await requests.abandon("its job was deleted before a savepoint answered it")
    except BackendError as error:
        raise kopf.TemporaryError(f"{error}; retrying", delay=RETRY_SECONDS) from None
    controller.metrics.forget(key)
    log.info("%s/%s deleted: %d objects removed", namespace, name, deleted)


def _disposes(spec: kopf.Spec, **_: Any) -> bool:
    return bool(spec.get("disposeOnDelete"))


@kopf.on.delete(*SNAPSHOTS, when=_disposes, registry=registry)
async def dispose_savepoint(*, body: kopf.Body, memo: Any, **_: Any) -> None:
    """Dispose of the savepoint's files before the snapshot goes (or wait while a job holds it)."""
    await disposal.dispose(_controller(memo).kube, body)
