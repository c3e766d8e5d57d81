"""What running on executor pods asks of a job, checked in the driver before anything runs.

* **Executors registered.** Spark holds back its first tasks until every executor the spec asks
  for registered or ``spec.executor.registrationTimeout`` passed
  (``spark.scheduler.minRegisteredResourcesRatio`` and ``maxRegisteredResourcesWaitingTime``),
  then goes on with whatever it has. With none at all its tasks would wait forever, saying only
  "Initial job has not accepted any resources": so the attempt fails instead, naming what keeps
  the executor pods from running (an image that cannot be pulled, a pod that fits no node).
* **State where the driver can read it.** A stateful query (aggregation, deduplication, a join of
  two streams, ``*GroupsWithState``) keeps its state in files that the executors write under
  Spark's checkpoint directory. Checkpoints and savepoints are cut from that directory by the
  driver, so on executor pods it must be a volume they all share with the driver
  (``spec.workVolume``); without one a resumed job would silently miss its state. Such a job is
  refused with a message naming the field, before its first batch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from finishable.driver.failures import PermanentFailure
from finishable.driver.outcome import JobFailed

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from finishable.api.jobconfig import JobConfig

log = logging.getLogger(__name__)

SPARK_EXECUTOR_LABELS = "spark-role=executor"
WORK_VOLUME_FIELD = "spec.workVolume"


def runs_executor_pods(spark: SparkSession) -> bool:
    return str(spark.sparkContext.master).startswith("k8s://")


def registered_executors(spark: SparkSession) -> int:
    """Executors registered with the driver now (the status tracker lists the driver too)."""
    infos = spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()
    return max(0, len(infos) - 1)


def check_executors(
    spark: SparkSession,
    expected: int,
    timeout: str,
    describe_pods: Callable[[str], str],
) -> int:
    """After Spark's own wait for executors: fail the attempt if none registered (transient:
    the restart budget applies); warn when only some did. ``describe_pods(app_id)`` says what
    the app's executor pods are doing."""
    registered = registered_executors(spark)
    if registered >= expected:
        return registered
    app = str(spark.sparkContext.applicationId)
    if registered == 0:
        raise JobFailed(
            f"no executor registered within {timeout} (spec.executor.registrationTimeout): "
            f"{describe_pods(app)}"
        )
    log.warning(
        "%d of %d executors registered within %s; running with those (%s)",
        registered,
        expected,
        timeout,
        describe_pods(app),
    )
    return registered


def executor_pods_of(namespace: str | None) -> Callable[[str], str]:
    """``describe_pods`` for :func:`check_executors`: the app's executor pods, through the API
    (with the driver's own account, which Spark uses to create them)."""

    def describe(app_id: str) -> str:
        from finishable.kube.api import KubeApi  # noqa: PLC0415 - on failure only

        try:
            api = KubeApi.from_environment(namespace=namespace)
            query = {"labelSelector": f"spark-app-selector={app_id},{SPARK_EXECUTOR_LABELS}"}
            response = api.request("GET", api.path("pods"), query=query)
        except Exception as error:  # the attempt fails anyway; say what can be said
            return f"its executor pods could not be listed ({error})"
        if response.status != 200:
            return f"its executor pods could not be listed ({response.message})"
        return describe_executor_pods(list(response.body.get("items") or []))

    return describe


def describe_executor_pods(pods: list[dict[str, Any]]) -> str:
    """One line on executor pods: each one's phase and why it waits, if it does."""
    if not pods:
        return "Spark created no executor pod (see the driver's log for the reason)"
    parts = []
    for pod in sorted(pods, key=lambda p: str(p["metadata"]["name"])):
        status = pod.get("status") or {}
        detail = [str(status.get("phase") or "Pending")]
        for condition in status.get("conditions") or []:
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                detail.append(str(condition.get("message") or condition.get("reason") or ""))
        for container in status.get("containerStatuses") or []:
            waiting = (container.get("state") or {}).get("waiting") or {}
            if waiting.get("reason"):
                detail.append(": ".join(filter(None, [waiting["reason"], waiting.get("message")])))
        parts.append(f"executor pod {pod['metadata']['name']} is {', '.join(filter(None, detail))}")
    return "; ".join(parts)


def _plan_nodes(plan: Any) -> Iterator[Any]:
    """A JVM logical plan's nodes, depth first (through py4j)."""
    stack = [plan]
    while stack:
        node = stack.pop()
        yield node
        children = node.children()
        stack.extend(children.apply(index) for index in range(children.size()))


STATEFUL_NODES = frozenset(
    {
        "Deduplicate",
        "DeduplicateWithinWatermark",
        "FlatMapGroupsWithState",
        "FlatMapGroupsInPandasWithState",
        "TransformWithState",
        "TransformWithStateInPySpark",
    }
)
"""Streaming plan nodes that keep state whatever Spark's checker says (in 4.3 it does not count
``Deduplicate``, whose state store holds every key seen)."""


def stateful_operators(spark: SparkSession, dataframe: DataFrame) -> list[str]:
    """The operators of a streaming query that keep state between micro-batches, by Spark's own
    judgement (``UnsupportedOperationChecker.isStatefulOperation``), the nodes of
    :data:`STATEFUL_NODES` and a global limit."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    checker = jvm.org.apache.spark.sql.catalyst.analysis.UnsupportedOperationChecker
    plan = dataframe._jdf.queryExecution().analyzed()
    found = []
    for node in _plan_nodes(plan):
        name = str(node.nodeName())
        streaming = bool(node.isStreaming())
        if checker.isStatefulOperation(node) or (
            streaming and (name in STATEFUL_NODES or name == "GlobalLimit")
        ):
            found.append(name)
    return found


def check_shared_state(
    spark: SparkSession, dataframe: DataFrame, *, executor_pods: bool, work_volume: bool
) -> None:
    """Refuse a stateful query on executor pods without a volume shared with the driver."""
    if work_volume or not executor_pods:
        return
    operators = stateful_operators(spark, dataframe)
    if operators:
        raise PermanentFailure(
            f"{WORK_VOLUME_FIELD} is required: this query keeps state "
            f"({', '.join(sorted(set(operators)))}) that executor pods write under Spark's "
            "checkpoint directory, and checkpoints and savepoints can only hold it if the driver "
            "and every executor mount one volume. Set spec.workVolume.claimName to a "
            "ReadWriteMany claim, or spec.workVolume.size for the operator to create one (or run "
            "Spark inside the driver pod with the operator's --spark-master local[N])"
        )


def check_placement(
    spark: SparkSession, config: JobConfig, dataframe: DataFrame | None = None
) -> None:
    """Both checks for a job about to run: executors registered (on executor pods), and a
    streaming query's state where the driver can read it (``dataframe``: the query's output)."""
    if not runs_executor_pods(spark):
        return
    executor = config.spec.executor
    check_executors(
        spark,
        executor.instances,
        str(executor.registration_timeout),
        executor_pods_of(config.namespace),
    )
    if dataframe is not None:
        check_shared_state(
            spark, dataframe, executor_pods=True, work_volume=config.spec.work_volume is not None
        )
