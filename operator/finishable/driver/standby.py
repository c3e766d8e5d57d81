"""A warm standby driver (``spec.recovery.standby``): Spark started, waiting to take over.

A new driver attempt spends most of its start on things that do not depend on the job's state:
the Python interpreter and its imports, the JVM, the Spark session and its executors, Spark's
Python workers. A standby driver is the next attempt started ahead of time up to that point. It
then waits, claiming nothing and reading nothing of the job, until whoever steers the job (the
operator, or ``finishable run``) writes the order to take over as its attempt into the control
channel, which it does when the active driver is lost. From the order on it is an ordinary new
attempt: it claims its epoch (which fences the lost driver, should that one still run somewhere),
reads the state and carries on where the lost one was.

The order carries the fence's grace: zero when the lost driver's process is known to have exited
(its pod failed, its process was reaped), so that no write of it can still be in flight;
otherwise the driver waits the usual grace before it reads.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F  # noqa: N812 - PySpark's convention
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from finishable.state.control import ControlChannel, TakeOver

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

WARM_UP_FORMAT = "finishable_standby_warm_up"


class _WarmUpReader(DataSourceReader):
    """One partition per core; each imports what a job's reader and stage tasks import."""

    def __init__(self, cores: int) -> None:
        self.cores = cores

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(core) for core in range(self.cores)]

    def read(self, partition: InputPartition) -> Iterator[tuple[int]]:
        import finishable.connectors.batch.datasources  # noqa: F401, PLC0415 - the warming

        yield (int(partition.value),)


class _WarmUp(DataSource):
    """The throwaway source :func:`warm_up` reads."""

    @classmethod
    def name(cls) -> str:
        return WARM_UP_FORMAT

    def schema(self) -> str:
        return "core INT"

    def reader(self, schema: Any) -> DataSourceReader:
        del schema
        return _WarmUpReader(int(self.options["cores"]))


def warm_up(spark: SparkSession) -> None:
    """Read a throwaway Python data source on every core, so that what a Python source pays on
    first use in a session (Spark's planner worker, its Python workers and their imports:
    measured ~5 s against ~0.2 s after) is paid before the takeover, not after it; and plan a
    query shaped like a job's stages once."""
    cores = max(1, spark.sparkContext.defaultParallelism)
    spark.dataSource.register(_WarmUp)
    frame = spark.read.format(WARM_UP_FORMAT).option("cores", str(cores)).load()
    frame.collect()
    # Catalyst's analysis, optimisation and planning of a query with parsing, a filter and a
    # shuffle, as a job's stages have: the JVM compiles those paths now (~1 s less planning).
    parsed = frame.select(F.from_json(F.to_json(F.struct("core")), "core INT").alias("row"))
    totals = parsed.where("row.core >= 0").groupBy("row.core").agg(F.count("*").alias("n"))
    totals.collect()


def await_takeover(
    control: ControlChannel,
    attempt: int,
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> TakeOver:
    """Block until the order to take over as ``attempt`` is in the control channel.

    A standby that is no longer wanted is ended by whoever started it (its pod or process is
    deleted), so it waits for nothing else. An unreachable channel is retried: a standby must
    not end over a blip of the API server while the job it stands by for runs well.
    """
    log.info("standby of attempt %d: Spark is warm; waiting for the order to take over", attempt)
    while True:
        try:
            order = control.takeover(attempt)
        except Exception as error:  # the channel's errors are all retried
            log.warning("standby of attempt %d: control channel unreadable: %s", attempt, error)
            order = None
        if order is not None:
            log.info("standby taking over as attempt %d", attempt)
            return order
        sleep(control.takeover_poll_seconds)
