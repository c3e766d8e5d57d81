"""The pure decisions of the JVM data path (connectors/jvm.py): which path a job and a
read take, and the options the project's jar is handed (ReadOptions.java reads them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from finishable.connectors.batch.datasources import format_name
from finishable.connectors.jvm import (
    DataPathError,
    chosen_path,
    hadoop_settings,
    hadoop_url,
    jvm_read_options,
    jvm_stream_options,
    partition_columns,
    sink_write_options,
    stage_read_options,
    stage_write_options,
    why_not_jvm,
    why_not_jvm_sink,
)
from finishable.connectors.kafka_java import (
    NoJavaSetting,
    java_consumer_settings,
    jvm_kafka_stream_options,
)
from finishable.connectors.sinks import TransactionalCallback, TransactionalFiles
from finishable.connectors.sources import Files, Kafka, Range

pytestmark = pytest.mark.quick

SCHEMA = StructType(
    [
        StructField("id", IntegerType()),
        StructField("year", IntegerType()),
        StructField("name", StringType()),
    ]
)


def test_the_data_path_is_the_jvm_unless_python_is_asked_and_nothing_else_is_accepted() -> None:
    assert chosen_path(None) == "jvm"
    assert chosen_path(" Python ") == "python"
    with pytest.raises(DataPathError, match=r"spark.finishable.dataPath='arrow'.*jvm, python"):
        chosen_path("arrow")


def test_local_files_and_s3_take_the_jvm_and_the_rest_say_why_not() -> None:
    assert why_not_jvm(Files("/data/orders", "json", SCHEMA)) is None
    assert why_not_jvm(Files("s3://bucket/orders/", "json", SCHEMA)) is None
    assert "gs://" in (why_not_jvm(Files("gs://bucket/orders/", "json", SCHEMA)) or "")
    assert "Range" in (why_not_jvm(Range(0, 10)) or "")


def test_an_s3_urls_store_and_keys_become_that_buckets_s3a_settings() -> None:
    url = "s3://AK:s%2Fk@orders/in?endpoint_override=minio:9000&scheme=http&region=eu-west-1"
    assert hadoop_settings(url, {"AWS_ENDPOINT_URL": "https://elsewhere"}) == {
        "fs.s3a.bucket.orders.endpoint": "http://minio:9000",
        "fs.s3a.bucket.orders.path.style.access": "true",
        "fs.s3a.bucket.orders.connection.ssl.enabled": "false",
        "fs.s3a.bucket.orders.endpoint.region": "eu-west-1",
        "fs.s3a.bucket.orders.access.key": "AK",
        "fs.s3a.bucket.orders.secret.key": "s/k",
        "fs.s3a.bucket.orders.aws.credentials.provider": (
            "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        ),
    }


def test_without_them_in_the_url_the_store_is_the_secret_refs_and_the_keys_the_connectors() -> None:
    environ = {"AWS_ENDPOINT_URL": "https://ceph.internal", "AWS_ACCESS_KEY_ID": "AK"}
    assert hadoop_settings("s3://orders/in", environ) == {
        "fs.s3a.bucket.orders.endpoint": "https://ceph.internal",
        "fs.s3a.bucket.orders.path.style.access": "true",
        "fs.s3a.bucket.orders.connection.ssl.enabled": "true",
        "fs.s3a.bucket.orders.endpoint.region": "us-east-1",
    }
    # AWS itself: the region at most, keys from the connector's chain (AWS_*, instance roles)
    assert hadoop_settings("s3://orders/in", {"AWS_REGION": "eu-north-1"}) == {
        "fs.s3a.bucket.orders.endpoint.region": "eu-north-1"
    }
    assert hadoop_settings("file:///data/orders", environ) == {}


def test_partition_columns_are_the_declared_ones_a_directory_names_in_schema_order() -> None:
    urls = [
        "file:///data/year=2024/name=a%20b/part-0.json",
        "file:///data/year=2025/other=x/part-1.json",
        "file:///data/part-2.json",
    ]
    assert partition_columns(SCHEMA, "file:///data", urls) == ["year", "name"]
    assert partition_columns(SCHEMA, "file:///data", ["file:///data/part-0.json"]) == []


def test_a_reads_options_carry_the_schema_the_spark_options_and_where_the_splits_come_from() -> (
    None
):
    source = Files(
        "/data/orders",
        "csv",
        SCHEMA,
        options={"header": True, "ignoreCorruptFiles": True},
    )
    options = jvm_read_options(
        source,
        read="orders",
        coordinator="orders",
        endpoint="http://driver:7070",
        token="t",
        slots=8,
        partitions=["year"],
        environ={},
    )
    assert options["name"] == format_name("read", "orders")  # what the job graph looks for
    assert options["slots"] == "8"
    assert StructType.fromJson(json.loads(options["schema"])) == SCHEMA
    assert json.loads(options["partitionColumns"]) == ["year"]
    # the skip is the slot reader's (reported to the coordinator), never Spark's silent one
    assert json.loads(options["sparkOptions"]) == {"header": "true"}
    assert options["skipUnreadable"] == "true"
    assert options["root"] == source.url
    assert json.loads(options["hadoopConf"]) == {}  # local files need no store settings


def test_stage_options_name_the_dataset_as_the_python_data_sources_do() -> None:
    write = stage_write_options(endpoint="http://d", token="t", dataset="paid", slotted=True)
    assert write == {"endpoint": "http://d", "token": "t", "dataset": "paid", "slotted": "true"}
    read = stage_read_options(
        dataset="paid", slots=4, endpoint="http://d", token="t", schema=SCHEMA
    )
    assert read["name"] == format_name("stage", "paid")
    assert read["slots"] == "4"
    assert StructType.fromJson(json.loads(read["schema"])) == SCHEMA


def test_a_streams_options_carry_the_batch_limits_and_the_pinned_attempt() -> None:
    source = Files("/data/clicks", "json", SCHEMA, max_splits_per_batch=4, split_size="1Mi")
    options = jvm_stream_options(
        source,
        coordinator="clicks",
        endpoint="http://driver:7070",
        token="t",
        attempt=None,
        min_partitions=2,
        partitions=[],
        environ={},
    )
    assert options["attempt"] == "-1"  # the one the driver makes ready for each run
    assert options["maxSplitsPerBatch"] == "4"
    assert options["splitSize"] == str(1024 * 1024)
    assert options["minPartitions"] == "2"
    assert options["coordinator"] == "clicks"
    assert "slots" not in options  # a stream has no reader slots


def test_parquet_sinks_on_local_files_and_s3_take_spark_writers_and_the_rest_say_why_not(
    tmp_path: Path,
) -> None:
    assert why_not_jvm_sink(TransactionalFiles(str(tmp_path), name="out")) is None
    on_s3 = "s3://bucket/out?region=us-east-1&endpoint_override=127.0.0.1:9&scheme=http"
    assert why_not_jvm_sink(TransactionalFiles(on_s3, name="out")) is None
    json_files = TransactionalFiles(str(tmp_path), format="json", name="out")
    assert "json files are written by Python" in (why_not_jvm_sink(json_files) or "")
    on_gcs = TransactionalFiles("gs://bucket/out", name="out")
    assert "gs://" in (why_not_jvm_sink(on_gcs) or "")
    callback = TransactionalCallback(
        lambda batch, table: None, name="cb", staging_url=str(tmp_path)
    )
    assert "TransactionalCallback" in (why_not_jvm_sink(callback) or "")


def test_a_sink_writes_options_say_where_hadoop_finds_its_directory(tmp_path: Path) -> None:
    sink = TransactionalFiles(str(tmp_path / "out dir"), name="totals")
    batch = sink_write_options(sink, endpoint="http://d", token="t", batch_id=7, environ={})
    assert batch["sinkUrl"] == f"file:{tmp_path}/out dir/totals"
    assert batch["batchId"] == "7"
    assert (batch["sink"], batch["format"]) == ("totals", "parquet")
    streaming = sink_write_options(sink, endpoint="http://d", token="t", batch_id=None, environ={})
    assert "batchId" not in streaming  # each micro-batch stages under its own id
    assert hadoop_url(sink.store, "_staging/x") == f"file:{tmp_path}/out dir/totals/_staging/x"


def test_kafka_client_settings_become_the_java_consumers_or_say_which_has_none() -> None:
    settings = java_consumer_settings(
        "b1:9092,b2:9092",
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": "reader",
            "sasl.password": 'p"a\\ss',
            "ssl.ca.location": "/etc/kafka/ca.pem",
            "fetch.message.max.bytes": "1048576",
            "group.id": "ignored",
        },
    )
    assert settings == {
        "bootstrap.servers": "b1:9092,b2:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="reader" password="p\\"a\\\\ss";',
        "ssl.truststore.location": "/etc/kafka/ca.pem",
        "ssl.truststore.type": "PEM",
        "max.partition.fetch.bytes": "1048576",  # the user's, over the default
        "fetch.max.bytes": str(64 << 20),
        "max.poll.records": "10000",
        "enable.auto.commit": "false",
        "isolation.level": "read_committed",
        "auto.offset.reset": "none",
    }
    with pytest.raises(NoJavaSetting, match=r"kafka.ssl.key.location has no Java"):
        java_consumer_settings("b:9092", {"ssl.key.location": "/k.pem"})
    with pytest.raises(NoJavaSetting, match="SASL GSSAPI"):
        java_consumer_settings("b:9092", {"sasl.username": "u", "sasl.password": "p"})


def test_a_kafka_source_takes_the_jvm_unless_a_client_setting_has_no_java_name() -> None:
    assert why_not_jvm(Kafka("b:9092", topics="clicks")) is None
    reason = why_not_jvm(
        Kafka("b:9092", topics="clicks", options={"kafka.ssl.key.location": "/k.pem"})
    )
    assert reason is not None and "kafka.ssl.key.location" in reason


def test_a_kafka_streams_options_carry_the_consumer_and_one_split_per_task() -> None:
    source = Kafka(
        "b:9092",
        topics="clicks",
        max_records_per_partition=5000,
        fail_on_data_loss=False,
        options={"kafka.client.id": "me"},
    )
    options = jvm_kafka_stream_options(
        source,
        coordinator="clicks",
        endpoint="http://d:1",
        token="t",
        attempt=None,
        min_partitions=4,
    )
    assert json.loads(options["consumer"])["client.id"] == "me"
    assert json.loads(options["schema"]) == source.schema.jsonValue()
    assert options["failOnDataLoss"] == "false"
    assert options["attempt"] == "-1"
    # A split weighs its offsets; a group is full at one split's worth, as the Python reader's.
    assert options["maxPartitionWeight"] == options["splitSize"] == "5000"
    assert options["openCost"] == "0"
