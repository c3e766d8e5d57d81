"""What running on executor pods asks of a job, checked in the driver: a stateful query needs
the work volume, and an attempt whose executors never registered fails with the reason."""

from __future__ import annotations

from typing import Any

import pytest

from finishable.driver.failures import PermanentFailure
from finishable.driver.outcome import JobFailed
from finishable.driver.placement import (
    check_executors,
    check_shared_state,
    describe_executor_pods,
    stateful_operators,
)

pytestmark = pytest.mark.quick


def rate(spark: Any) -> Any:
    return spark.readStream.format("rate").option("rowsPerSecond", 1).load()


def test_spark_says_which_queries_keep_state(spark: Any) -> None:
    from pyspark.sql import functions as sf

    stream = rate(spark)
    windowed = stream.withWatermark("timestamp", "1 minute").groupBy(
        sf.window("timestamp", "1 minute")
    )
    assert "Aggregate" in stateful_operators(spark, windowed.count())
    assert "Deduplicate" in stateful_operators(spark, stream.dropDuplicates(["value"]))
    other = rate(spark).withColumnRenamed("value", "other")
    joined = stream.join(other, stream["value"] == other["other"])
    assert "Join" in stateful_operators(spark, joined)
    stateless = stream.where("value % 2 = 0").selectExpr("value * 2 AS doubled")
    assert stateful_operators(spark, stateless) == []


def test_a_stateful_query_on_executor_pods_needs_the_work_volume(spark: Any) -> None:
    counts = rate(spark).groupBy("value").count()
    with pytest.raises(PermanentFailure, match=r"spec\.workVolume is required.*Aggregate"):
        check_shared_state(spark, counts, executor_pods=True, work_volume=False)
    check_shared_state(spark, counts, executor_pods=True, work_volume=True)
    check_shared_state(spark, counts, executor_pods=False, work_volume=False)
    stateless = rate(spark).selectExpr("value + 1 AS next")
    check_shared_state(spark, stateless, executor_pods=True, work_volume=False)


def test_an_attempt_without_executors_fails_and_says_why(spark: Any) -> None:
    """A local session has no executors: the check reports what the pods are doing."""
    described: list[str] = []

    def describe(app: str) -> str:
        described.append(app)
        return "executor pod x-exec-1 is Pending: ImagePullBackOff"

    with pytest.raises(JobFailed, match=r"no executor registered within 3m.*ImagePullBackOff"):
        check_executors(spark, 2, "3m", describe)
    assert described == [spark.sparkContext.applicationId]
    assert check_executors(spark, 0, "3m", describe) == 0


def test_executor_pods_are_described_by_what_keeps_them() -> None:
    pods = [
        {
            "metadata": {"name": "b-exec-2"},
            "status": {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "message": "0/3 nodes are available: 3 Insufficient memory.",
                    }
                ],
            },
        },
        {
            "metadata": {"name": "b-exec-1"},
            "status": {
                "phase": "Pending",
                "containerStatuses": [
                    {"state": {"waiting": {"reason": "ErrImagePull", "message": "not found"}}}
                ],
            },
        },
    ]
    assert describe_executor_pods(pods) == (
        "executor pod b-exec-1 is Pending, ErrImagePull: not found; "
        "executor pod b-exec-2 is Pending, 0/3 nodes are available: 3 Insufficient memory."
    )
    assert "created no executor pod" in describe_executor_pods([])
