"""The JVM data path (``jvm/``: the JVM twins of ``connectors.batch.datasources`` and of the
streaming source, ``connectors.streaming.source``).

The rows of a Python data source or writer cross from the JVM to a Python worker and back (the
batch benchmark's floor: 2.7x plain Spark on JSON). The project's jar keeps them in the JVM:
``dev.finishable.spark.FilesRead`` is a Batch read's reader slots and, as ``SplitStream``, a
streaming read of a ``sources.Files`` source, each split the coordinator hands out read by the
format reader ``spark.read`` would use; ``KafkaRead`` is a ``SplitStream`` of a
``sources.Kafka`` source, each split read by Kafka's Java consumer; ``StageWrite`` and
``StageRead`` are a Batch stage's writers and the next stage's readers, Arrow to and from the
shuffle servers. All keep the round property, offsets and driver calls of the Python ones. The
decisions here are pure functions (which path, and the options that tell the JVM what to do);
``jvm_stream`` and ``jvm_class_loadable`` are the edges that ask Spark and list files.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, unquote, urlsplit

from finishable.connectors.batch.datasources import format_name
from finishable.connectors.kafka_java import (
    NoJavaSetting,
    java_consumer_settings,
    jvm_kafka_stream_options,
    kafka_producer_settings,
    kafka_write_options,
)
from finishable.connectors.sink_store import SinkStore
from finishable.connectors.sinks import Kafka as KafkaSink
from finishable.connectors.sinks import TransactionalFiles, TransactionalSink
from finishable.connectors.sources import Files, Kafka, Source
from finishable.coordinator.files import list_files, partition_values

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.readwriter import DataStreamWriter
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

JVM_SOURCE = "dev.finishable.spark.FilesRead"
JVM_KAFKA_SOURCE = "dev.finishable.spark.KafkaRead"
KAFKA_CLIENT = "org.apache.kafka.clients.consumer.KafkaConsumer"
"""Kafka's Java client (docker/spark-jars.txt), which ``KafkaRead`` reads with."""
JVM_STAGE_WRITE = "dev.finishable.spark.StageWrite"
JVM_STAGE_READ = "dev.finishable.spark.StageRead"
JVM_SINK_WRITE = "dev.finishable.spark.SinkWrite"
JVM_KAFKA_WRITE = "dev.finishable.spark.KafkaWrite"
DATA_PATH_CONF = "spark.finishable.dataPath"
"""Batch jobs: ``jvm`` (the default: the JVM where a read or stage allows it) or ``python``."""
STREAMING_DATA_PATH_CONF = "spark.finishable.dataPath.streaming"
"""Streaming queries: ``jvm`` (the default: ``SplitStream`` where a source allows it) or
``python``."""
DATA_PATHS = ("jvm", "python")
_NOT_PASSED = frozenset({"ignoreCorruptFiles", "ignoreMissingFiles"})
"""Handled by the slot reader (a skipped split is reported to the coordinator), not by Spark's
format reader, which would drop an unreadable file silently."""


class DataPathError(ValueError):
    """``spark.finishable.dataPath`` has a value it cannot have."""


def chosen_path(value: str | None, *, conf: str = DATA_PATH_CONF) -> str:
    """The data path a setting (``spark.finishable.dataPath`` by default) asks for: ``jvm``
    when it is not set."""
    path = (value or "jvm").strip().lower()
    if path not in DATA_PATHS:
        accepted = ", ".join(DATA_PATHS)
        raise DataPathError(f"spark conf {conf}={value!r} is not accepted: use one of {accepted}")
    return path


JVM_SCHEMES = ("file", "s3")
"""Where Spark's own readers reach a source's files: local (or mounted) files, and S3 through
Hadoop's S3 connector (``s3a``, docker/spark-jars.txt). ``gs://`` and ``hdfs://`` need
connectors the image does not carry: pyarrow reads them."""


def why_not_jvm(source: Source) -> str | None:
    """Why the JVM cannot read ``source`` here (None: it can)."""
    if isinstance(source, Kafka):
        try:
            java_consumer_settings(source.bootstrap_servers, source.client_options)
        except NoJavaSetting as error:
            return f"{error} (the Python reader takes librdkafka's settings)"
        return None
    if not isinstance(source, Files):
        return f"{type(source).__name__} sources are read by Python"
    scheme = urlsplit(source.url).scheme
    if scheme not in JVM_SCHEMES:
        return f"{scheme}:// inputs are read by Python (pyarrow's file systems)"
    return None


JVM_SINK_FORMATS = ("parquet",)
"""What Spark's own writers write for ``TransactionalFiles``. JSON stays Python's: Spark's JSON
writer spells decimals as numbers and times with its own pattern, not what ``read_committed``
and earlier output read."""


def why_not_jvm_sink(sink: TransactionalSink | KafkaSink) -> str | None:
    """Why Spark's own writers (or Kafka's Java producer) cannot write ``sink``'s micro-batches
    here (None: they can)."""
    if isinstance(sink, KafkaSink):
        try:
            kafka_producer_settings(sink)
        except NoJavaSetting as error:
            return f"{error} (the Python writer takes librdkafka's settings)"
        return None
    if not isinstance(sink, TransactionalFiles):
        return f"{type(sink).__name__} sinks are staged by Python"
    if sink.format not in JVM_SINK_FORMATS:
        return f"{sink.format} files are written by Python"
    scheme = urlsplit(sink.url).scheme or "file"
    if scheme not in JVM_SCHEMES:
        return f"{scheme}:// sinks are written by Python (pyarrow's file systems)"
    return None


def hadoop_url(store: SinkStore, relative: str) -> str:
    """Where Hadoop finds a path of a sink on local files or S3 (``why_not_jvm_sink``)."""
    path = store.path(relative) if relative else store.root
    return f"s3a://{path}" if store.fs.type_name == "s3" else f"file:{path}"


def sink_write_options(
    sink: TransactionalFiles,
    *,
    endpoint: str,
    token: str,
    batch_id: int | None,
    environ: Mapping[str, str],
) -> dict[str, str]:
    """The options of a ``SinkWrite`` (SinkWrite.Settings reads them): a Batch sink stage's,
    publishing as ``batch_id``, or a streaming query's (``None``: each micro-batch's own)."""
    store = sink.store
    options = {
        "endpoint": endpoint,
        "token": token,
        "sink": sink.sink_name,
        "format": sink.format,
        "sinkUrl": hadoop_url(store, "").rstrip("/"),
        "hadoopConf": json.dumps(hadoop_settings(store.url, environ), sort_keys=True),
    }
    if batch_id is not None:
        options["batchId"] = str(batch_id)
    return options


def jvm_sink_stream(
    sink: TransactionalSink | KafkaSink, frame: DataFrame, *, endpoint: str, token: str
) -> DataStreamWriter | None:
    """``frame``'s stream writer into ``sink`` in the JVM (``SinkWrite``: Spark's own file
    writers; ``KafkaWrite``: Kafka's Java producer; each micro-batch published or committed by the
    driver through ``endpoint``), or None where the Python writer writes it:
    ``spark.finishable.dataPath.streaming: python``, a sink they cannot write, or no jar."""
    spark = frame.sparkSession
    path = chosen_path(
        spark.conf.get(STREAMING_DATA_PATH_CONF, None), conf=STREAMING_DATA_PATH_CONF
    )
    reason = "python" if path == "python" else why_not_jvm_sink(sink)
    if reason is None:
        reason = missing_classes(spark, kafka=isinstance(sink, KafkaSink))
    if reason is not None:
        log.info("sink %r: written by Python: %s", sink.sink_name, reason)
        return None
    if isinstance(sink, KafkaSink):
        sink.prepare(frame)
        log.info("sink %r: Kafka's Java producer, committed by the driver", sink.sink_name)
        options = kafka_write_options(sink, endpoint=endpoint, token=token)
        return frame.writeStream.format(JVM_KAFKA_WRITE).options(**options)
    assert isinstance(sink, TransactionalFiles)  # why_not_jvm_sink said so
    options = sink_write_options(
        sink, endpoint=endpoint, token=token, batch_id=None, environ=os.environ
    )
    log.info("sink %r: Spark's own %s writer, published by the driver", sink.sink_name, sink.format)
    return frame.writeStream.format(JVM_SINK_WRITE).options(**options)


def hadoop_settings(url: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The Hadoop settings that let Spark's S3 connector read what pyarrow reads at ``url``.

    A source URL says where its store is as pyarrow does (``s3://KEY:SECRET@bucket/prefix?
    endpoint_override=host:port&scheme=http&region=..``; without them the ``AWS_*`` variables a
    ``secretRef`` sets). The JVM reads ``s3a://bucket/key`` (SplitReader.hadoopUrl), with the same
    store given to that bucket alone (``fs.s3a.bucket.NAME.*``), so two sources on two stores do
    not meet. Keys in neither place are left to the connector's own chain (instance roles).
    """
    parts = urlsplit(url)
    if parts.scheme != "s3":
        return {}
    bucket = parts.hostname or ""
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    endpoint = (
        query.get("endpoint_override")
        or environ.get("AWS_ENDPOINT_URL_S3")
        or environ.get("AWS_ENDPOINT_URL")
    )
    region = query.get("region") or environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION")
    settings: dict[str, str] = {}
    if endpoint:
        if "://" not in endpoint:
            endpoint = f"{query.get('scheme', 'https')}://{endpoint}"
        settings["endpoint"] = endpoint
        settings["path.style.access"] = "true"  # MinIO, Ceph and moto serve buckets as paths
        settings["connection.ssl.enabled"] = str(endpoint.startswith("https://")).lower()
        region = region or "us-east-1"
    if region:
        settings["endpoint.region"] = region
    if parts.username is not None:
        settings["access.key"] = unquote(parts.username)
        settings["secret.key"] = unquote(parts.password or "")
        settings["aws.credentials.provider"] = (
            "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        )
    return {f"fs.s3a.bucket.{bucket}.{key}": value for key, value in settings.items()}


def partition_columns(schema: StructType, root: str, urls: Iterable[str]) -> list[str]:
    """The schema's columns that a ``key=value`` directory below ``root`` gives, in schema order."""
    named: set[str] = set()
    for url in urls:
        named.update(partition_values(root, url))
    return [f.name for f in schema.fields if f.name in named]


def jvm_read_options(
    source: Files,
    *,
    read: str,
    coordinator: str,
    endpoint: str,
    token: str,
    slots: int,
    partitions: list[str],
    environ: Mapping[str, str],
) -> dict[str, str]:
    """The options of one Batch read's ``FilesRead`` (ReadOptions.java reads them)."""
    return {
        "name": format_name("read", read),
        "read": read,
        "slots": str(slots),
        **_source_options(
            source,
            coordinator=coordinator,
            endpoint=endpoint,
            token=token,
            partitions=partitions,
            environ=environ,
        ),
    }


def _source_options(
    source: Files,
    *,
    coordinator: str,
    endpoint: str,
    token: str,
    partitions: list[str],
    environ: Mapping[str, str],
) -> dict[str, str]:
    """What every read of ``source`` tells ``FilesRead``: where its splits come from and how
    Spark's format reader reads them."""
    spark_options = {k: v for k, v in source.options.options.items() if k not in _NOT_PASSED}
    return {
        "endpoint": endpoint,
        "token": token,
        "coordinator": coordinator,
        "format": source.format,
        "root": source.url,
        "skipUnreadable": str(source.on_error == "skip" or source.options.skip_unreadable).lower(),
        "schema": source.schema.json(),
        "partitionColumns": json.dumps(partitions),
        "sparkOptions": json.dumps(spark_options, sort_keys=True),
        "hadoopConf": json.dumps(hadoop_settings(source.url, environ), sort_keys=True),
    }


def typed(frame: DataFrame, schema: StructType, partitions: list[str]) -> DataFrame:
    """The JVM read's rows in the declared schema: its columns in order, partition values (read
    as text from the paths) cast to their declared types, as ``spark.read`` casts them."""
    from finishable.connectors.fileformats import column  # noqa: PLC0415

    return frame.select(
        *[
            column(f.name).cast(f.dataType).alias(f.name)
            if f.name in partitions
            else column(f.name)
            for f in schema.fields
        ]
    )


def jvm_stream_options(
    source: Files,
    *,
    coordinator: str,
    endpoint: str,
    token: str,
    attempt: int | None,
    min_partitions: int,
    partitions: list[str],
    environ: Mapping[str, str],
) -> dict[str, str]:
    """The options of a streaming read's ``FilesRead`` (its ``SplitStream``)."""
    return {
        **_source_options(
            source,
            coordinator=coordinator,
            endpoint=endpoint,
            token=token,
            partitions=partitions,
            environ=environ,
        ),
        "attempt": str(-1 if attempt is None else attempt),
        "maxSplitsPerBatch": str(source.max_splits_per_batch),
        "maxPartitionWeight": str(source.max_partition_bytes),
        "openCost": str(source.open_cost),
        "minPartitions": str(min_partitions),
        "splitSize": str(source.split_size or 0),
    }


def jvm_stream(
    spark: SparkSession,
    source: Source,
    *,
    coordinator: str,
    endpoint: str,
    token: str,
    attempt: int | None,
    min_partitions: int | None,
    sentinel_column: bool,
) -> DataFrame | None:
    """``source``'s streaming DataFrame read in the JVM (``SplitStream``: Spark's own file readers
    for files, Kafka's Java consumer for Kafka), or None where the Python reader reads it:
    ``spark.finishable.dataPath.streaming: python``, a source the JVM cannot read, a drain marker
    column asked for, or no jar."""
    path = chosen_path(
        spark.conf.get(STREAMING_DATA_PATH_CONF, None), conf=STREAMING_DATA_PATH_CONF
    )
    if not isinstance(source, Files | Kafka) or sentinel_column:
        return None
    reason = (
        "python"
        if path == "python"
        else why_not_jvm(source) or missing_classes(spark, kafka=isinstance(source, Kafka))
    )
    if reason is not None:
        log.info("source %r: read by Python: %s", coordinator, reason)
        return None
    cores = min_partitions or max(1, int(spark.sparkContext.defaultParallelism))
    if isinstance(source, Kafka):
        log.info("source %r: Kafka's Java consumer under the coordinator", coordinator)
        options = jvm_kafka_stream_options(
            source,
            coordinator=coordinator,
            endpoint=endpoint,
            token=token,
            attempt=attempt,
            min_partitions=cores,
        )
        return spark.readStream.format(JVM_KAFKA_SOURCE).options(**options).load()
    # Partition columns are decided from the files there now (a key=value directory that first
    # appears later is read as a data column). The coordinator may not have listed yet (a job
    # declares its streams before it starts them): list here, once.
    listed = list_files(
        source.url,
        bounded=False,
        pattern=source.pattern,
        recursive=source.options.recursive,
        name_glob=source.options.name_glob,
    )
    partitions = partition_columns(source.schema, source.url, (f.url for f in listed))
    options = jvm_stream_options(
        source,
        coordinator=coordinator,
        endpoint=endpoint,
        token=token,
        attempt=attempt,
        min_partitions=cores,
        partitions=partitions,
        environ=os.environ,
    )
    log.info("source %r: Spark's %s reader under the coordinator", coordinator, source.format)
    frame = spark.readStream.format(JVM_SOURCE).options(**options).load()
    return typed(frame, source.schema, partitions)


def stage_write_options(
    *, endpoint: str, token: str, dataset: str, slotted: bool
) -> dict[str, str]:
    """The options of one stage run's ``StageWrite`` (StageWrite.Settings reads them)."""
    return {
        "endpoint": endpoint,
        "token": token,
        "dataset": dataset,
        "slotted": str(slotted).lower(),
    }


def stage_read_options(
    *, dataset: str, slots: int, endpoint: str, token: str, schema: StructType
) -> dict[str, str]:
    """The options of a staged dataset's ``StageRead`` (its reader slots)."""
    return {
        "name": format_name("stage", dataset),
        "dataset": dataset,
        "slots": str(slots),
        "endpoint": endpoint,
        "token": token,
        "schema": schema.json(),
    }


def jvm_source_loadable(spark: SparkSession) -> bool:
    """Whether the project's jar is on Spark's classpath (``make jars``; the image has it)."""
    return jvm_class_loadable(spark, JVM_SOURCE)


def missing_classes(spark: SparkSession, *, kafka: bool) -> str | None:
    """What the JVM path lacks on Spark's classpath: the project's jar, or (``kafka``) Kafka's
    Java client; None when nothing is missing."""
    if not jvm_source_loadable(spark):
        return f"the project's jar ({JVM_SOURCE}) is not on Spark's classpath"
    if kafka and not jvm_class_loadable(spark, KAFKA_CLIENT):
        return f"Kafka's Java client ({KAFKA_CLIENT}) is not on Spark's classpath"
    return None


def jvm_class_loadable(spark: SparkSession, name: str) -> bool:
    """Whether Spark's driver JVM can load the class ``name``."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    try:
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName(name, False, loader)
    except Exception:
        return False
    return True
