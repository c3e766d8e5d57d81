"""What the job runtime fills in for a sink the program left unset: where it stages, where an
Iceberg table lives by default, a Kafka sink's transactional ids, and which run it records.

The defaults follow the job's state: in object storage, staging goes next to it (every executor
and the driver reach it); locally, under the job's directory. An Iceberg sink's table is created
or checked here, when the program declares its output, so a mistake fails the job before any
query or stage runs, with a message naming it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from finishable.api.jobconfig import JobConfig
from finishable.api.models import OBJECT_STORE_SCHEMES
from finishable.connectors.sink_store import SinkError
from finishable.connectors.sinks import (
    Iceberg,
    IcebergConfigError,
    Kafka,
    TransactionalSink,
)
from finishable.driver.failures import ProgramError
from finishable.partitions.manifest import object_url

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def default_staging(config: JobConfig, sink: TransactionalSink) -> str:
    """Where a callback or Iceberg sink stages: next to the state in object storage, else
    locally."""
    url = config.state_url
    scheme = urlsplit(url).scheme.lower()
    if scheme in OBJECT_STORE_SCHEMES:
        return object_url(url, "staging")  # before its query (an S3 endpoint), if any
    if scheme == "configmap":
        raise ProgramError(
            f"{type(sink).__name__} needs staging_url when checkpoints are stored in "
            "ConfigMaps: pass a location every executor and the driver can reach"
        )
    return str(Path(config.work_dir).parent / "staging")


def prepared_iceberg(config: JobConfig, sink: Iceberg, dataframe: DataFrame) -> Iceberg:
    """The sink with the runtime's defaults, its table created or checked against ``dataframe``
    now: a mistake is a permanent failure naming it, before anything runs.

    The default warehouse (with its SQLite catalog) is the job's local directory, only when the
    job keeps its state locally: a driver pod's disk would not outlive the pod.
    """
    scheme = urlsplit(config.state_url).scheme.lower()
    local = scheme not in OBJECT_STORE_SCHEMES and scheme != "configmap"
    sink = sink.with_defaults(
        staging_url=None if sink.staging_url else default_staging(config, sink),
        warehouse=str(Path(config.work_dir).parent / "iceberg") if local else None,
        run=config.run_key,
    )
    try:
        sink.prepare(dataframe)
    except IcebergConfigError as error:
        raise ProgramError(str(error)) from None
    return sink


def prepared_kafka(config: JobConfig, sink: Kafka, dataframe: DataFrame) -> Kafka:
    """The sink with the runtime's defaults: its commit record staged next to the job's state,
    and transactional ids ``finishable-<namespace>.<job>-<sink>-<partition>``, unique per job and
    sink and the same in every attempt, so a new attempt fences what an old one left open."""
    try:
        sink.check(dataframe)
    except SinkError as error:
        raise ProgramError(str(error)) from None
    owner = f"{config.namespace}.{config.name}" if config.namespace else config.name
    return sink.with_defaults(
        staging_url=None
        if sink.staging_url or sink.delivery != "exactly-once"
        else default_staging(config, sink),
        transactional_id_prefix=f"finishable-{owner}-{sink.sink_name}",
        run=config.run_key,
    )
