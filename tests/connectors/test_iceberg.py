"""The Iceberg sink's commit on a real SQLite catalog and a local warehouse, without Spark.

The publish step of a micro-batch (or a Batch job) is ``IcebergTarget.commit``: these tests call
it as a replaying driver would, and read the table back through pyiceberg.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from finishable.connectors.iceberg import PAUSE_ENV, catalog_properties
from finishable.connectors.sinks import (
    BATCH_KEY,
    RUN_KEY,
    SINK_KEY,
    Iceberg,
    IcebergConfigError,
    IcebergSchemaError,
)
from tests.state.conftest import BUCKET, S3Server

pytestmark = pytest.mark.quick

START = datetime(2026, 3, 1, tzinfo=UTC)
SCHEMA = pa.schema(
    [("id", pa.int64()), ("page", pa.string()), ("ts", pa.timestamp("us", tz="UTC"))]
)


def rows(first: int, count: int) -> pa.Table:
    ids = list(range(first, first + count))
    return pa.table(
        {
            "id": ids,
            "page": [f"p{i % 3}" for i in ids],
            "ts": [START + timedelta(hours=7 * i) for i in ids],
        },
        schema=SCHEMA,
    )


def sink(tmp: Path, **options: object) -> Iceberg:
    return Iceberg("web.clicks", warehouse=str(tmp / "wh"), name="clicks", **options).with_defaults(
        run="run-1"
    )


def snapshots_of(table: object, batch_id: int) -> int:
    return sum(
        1
        for snapshot in table.snapshots()  # type: ignore[attr-defined]
        if snapshot.summary.get(BATCH_KEY) == str(batch_id)
        and snapshot.summary.get(SINK_KEY) == "clicks"
    )


def test_a_batch_committed_twice_is_in_the_table_once(tmp_path: Path) -> None:
    target = sink(tmp_path).target
    target.prepare(SCHEMA)
    assert target.last_committed() is None
    assert target.commit(0, rows(0, 10), overwrite=False) is True
    assert target.commit(1, rows(10, 5), overwrite=False) is True
    # The replays after a crash: recognised, nothing added.
    assert target.commit(1, rows(10, 5), overwrite=False) is False
    assert target.commit(0, rows(0, 10), overwrite=False) is False

    table = sink(tmp_path).load_table()
    got = sorted(table.scan().to_arrow().column("id").to_pylist())
    assert got == list(range(15))
    assert [snapshots_of(table, b) for b in (0, 1)] == [1, 1]
    current = table.current_snapshot()
    assert current is not None
    assert current.summary.get(RUN_KEY) == "run-1"
    assert target.committed_batches() == [0, 1]
    assert sink(tmp_path).last_committed_batch() == 1
    # The catalog is a SQLite file beside the data.
    assert (tmp_path / "wh" / "catalog.db").is_file()
    assert list((tmp_path / "wh" / "web" / "clicks" / "data").glob("*.parquet"))


def test_the_marker_property_recognises_a_batch_whose_snapshot_expired(tmp_path: Path) -> None:
    target = sink(tmp_path).target
    target.prepare(SCHEMA)
    target.commit(0, rows(0, 4), overwrite=False)
    target.commit(1, rows(4, 4), overwrite=False)
    table = sink(tmp_path).load_table()
    first = table.snapshots()[0].snapshot_id
    table.maintenance.expire_snapshots().by_id(first).commit()
    assert target.committed_batches() == [1]
    assert target.commit(0, rows(0, 4), overwrite=False) is False
    assert sink(tmp_path).read().num_rows == 8


def test_overwrite_mode_replaces_the_rows_with_each_batch(tmp_path: Path) -> None:
    target = sink(tmp_path, mode="overwrite").target
    target.prepare(SCHEMA)
    assert target.commit(0, rows(0, 6), overwrite=True)
    assert target.commit(1, rows(100, 3), overwrite=True)
    assert not target.commit(1, rows(100, 3), overwrite=True)
    table = sink(tmp_path).load_table()
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [100, 101, 102]
    assert [snapshots_of(table, b) for b in (0, 1)] == [1, 1]
    # An empty batch overwrites too: the table then holds nothing.
    assert target.commit(2, rows(0, 0), overwrite=True)
    assert sink(tmp_path).read().num_rows == 0


def test_a_dataframe_that_does_not_fit_the_table_is_refused_naming_each_column(
    tmp_path: Path,
) -> None:
    sink(tmp_path).target.prepare(SCHEMA)
    other = pa.schema(
        [("id", pa.string()), ("page", pa.string()), ("ts", pa.timestamp("us")), ("x", pa.int32())]
    )
    with pytest.raises(IcebergSchemaError) as raised:
        sink(tmp_path).target.prepare(other, {"id": "string", "ts": "timestamp_ntz", "x": "int"})
    message = str(raised.value)
    assert "'web.clicks'" in message
    assert "column 'id': the table has long, the DataFrame has string" in message
    assert "column 'ts': the table has timestamptz, the DataFrame has timestamp_ntz" in message
    assert "column 'x' (int) is not in the table (its columns: id, page, ts)" in message
    # A safe promotion (int into long) and a missing optional column are accepted.
    narrower = pa.schema([("id", pa.int32()), ("ts", pa.timestamp("us", tz="UTC"))])
    target = sink(tmp_path).target
    target.prepare(narrower)
    data = pa.table({"id": pa.array([7], pa.int32()), "ts": [START]}, schema=narrower)
    assert target.commit(0, data, overwrite=False)
    assert sink(tmp_path).read().to_pylist() == [{"id": 7, "page": None, "ts": START}]


def test_a_partitioned_table_is_created_written_and_checked(tmp_path: Path) -> None:
    partitioned = sink(tmp_path, partition_by=["day(ts)", "page"])
    target = partitioned.target
    target.prepare(SCHEMA)
    assert target.commit(0, rows(0, 20), overwrite=False)
    table = partitioned.load_table()
    assert [str(f.transform) for f in table.spec().fields] == ["day", "identity"]
    files = table.inspect.files().column("file_path").to_pylist()
    days = {(START + timedelta(hours=7 * i)).date().isoformat() for i in range(20)}
    assert {f.split("ts_day=")[1].split("/")[0] for f in files} == days
    assert all("/page=p" in f for f in files)
    read = table.scan().to_arrow().sort_by("id")
    assert read.to_pylist() == rows(0, 20).to_pylist()
    # The same table asked for with another partitioning: refused, naming both.
    with pytest.raises(IcebergConfigError, match=r"partitioned by \[day\(ts\), identity\(page\)\]"):
        sink(tmp_path, partition_by=["hour(ts)"]).target.prepare(SCHEMA)
    with pytest.raises(IcebergConfigError, match="the DataFrame has no column 'when'"):
        Iceberg("web.other", warehouse=str(tmp_path), partition_by=["day(when)"]).target.prepare(
            SCHEMA
        )


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"table": "clicks"}, "invalid Iceberg table 'clicks': use 'namespace.table'"),
        ({"table": "web..clicks"}, "invalid Iceberg table 'web..clicks'"),
        ({"mode": "upsert"}, "unknown Iceberg mode 'upsert': use 'append' or 'overwrite'"),
        ({"partition_by": ["week(ts)"]}, "partition_by entry 'week(ts)': use a column name"),
        ({"partition_by": ["bucket(ts)"]}, "partition_by entry 'bucket(ts)'"),
        ({"partition_by": "page"}, "write partition_by=['page']"),
        ({"catalog": {"warehouse": "/x"}}, "names neither 'uri' nor 'type'"),
        ({"warehouse": "s3://bucket/wh"}, "default SQLite catalog has nowhere to live"),
    ],
)
def test_bad_options_are_refused_naming_the_value(
    options: dict[str, object], expected: str
) -> None:
    arguments: dict[str, object] = {"table": "web.clicks", "warehouse": "/tmp/wh", **options}
    if "catalog" in options:
        del arguments["warehouse"]
    with pytest.raises(IcebergConfigError) as raised:
        Iceberg(**arguments)  # type: ignore[arg-type]
    assert expected in str(raised.value)


def test_a_sink_without_a_warehouse_or_catalog_says_what_it_needs() -> None:
    with pytest.raises(IcebergConfigError, match=r"needs warehouse= .* or catalog="):
        _ = Iceberg("web.clicks").target


def test_catalog_properties_pass_through_and_hide_secrets_in_messages(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path}/other.db"
    name, properties = catalog_properties(
        {"name": "prod", "uri": uri, "s3.secret-access-key": "hunter2"}, "s3://bucket/wh"
    )
    assert name == "prod"
    assert properties == {
        "uri": uri,
        "s3.secret-access-key": "hunter2",
        "warehouse": "s3://bucket/wh",
    }
    with pytest.raises(IcebergConfigError) as raised:
        catalog_properties({"s3.secret-access-key": "hunter2"}, None)
    assert "hunter2" not in str(raised.value)


def test_an_explicit_sql_catalog_holds_the_table_under_its_name(tmp_path: Path) -> None:
    catalog = {"name": "lake", "uri": f"sqlite:///{tmp_path}/lake.db", "warehouse": str(tmp_path)}
    nested = Iceberg("a.b.t", catalog=catalog)
    with pytest.raises(IcebergConfigError, match=r"cannot create table .a\.b\.t.: .*hierarchical"):
        nested.target.prepare(SCHEMA)  # the SQL catalog has one level of namespaces
    explicit = Iceberg("lake.t", catalog=catalog, name="x").with_defaults(warehouse="/ignored")
    assert explicit.warehouse is None
    explicit.target.prepare(SCHEMA)
    assert explicit.target.commit(3, rows(0, 2), overwrite=False)
    from pyiceberg.catalog import load_catalog

    again = load_catalog("lake", uri=catalog["uri"], warehouse=str(tmp_path))
    assert again.load_table("lake.t").scan().to_arrow().num_rows == 2
    assert explicit.last_committed_batch() == 3


def test_the_pause_point_holds_the_commit_until_released(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The crash tests' fault point: data files written, catalog not yet committed."""
    import threading

    pause = tmp_path / "pause"
    pause.mkdir()
    monkeypatch.setenv(PAUSE_ENV, str(pause))
    target = sink(tmp_path).target
    target.prepare(SCHEMA)
    assert target.commit(0, rows(10, 1), overwrite=False)  # no hold file: no pause
    hold = pause / "clicks-1.hold"
    hold.touch()
    done = threading.Event()
    worker = threading.Thread(
        target=lambda: (target.commit(1, rows(0, 3), overwrite=False), done.set())
    )
    worker.start()
    marker = pause / "clicks-1.paused"
    deadline = datetime.now(UTC) + timedelta(seconds=60)
    while not marker.exists():
        assert datetime.now(UTC) < deadline, "the commit never reached the pause point"
        done.wait(0.05)
    assert len(list((tmp_path / "wh" / "web" / "clicks" / "data").glob("*.parquet"))) == 2
    assert sink(tmp_path).target.committed_batches() == [0]
    hold.unlink()
    worker.join(60)
    assert done.is_set()
    assert sink(tmp_path).read().num_rows == 4


def test_a_warehouse_in_object_storage_with_a_local_sqlite_catalog(
    tmp_path: Path, s3_server: S3Server
) -> None:
    catalog = {
        "uri": f"sqlite:///{tmp_path}/catalog.db",
        "warehouse": f"s3://{BUCKET}/wh-{tmp_path.name}",
        "s3.endpoint": f"http://{s3_server.endpoint}",
        "s3.region": "us-east-1",
        "s3.access-key-id": "testing",
        "s3.secret-access-key": "testing",
    }
    on_s3 = Iceberg("web.clicks", catalog=catalog, name="clicks", partition_by=["page"])
    assert "testing" not in str(on_s3.fingerprint())
    target = on_s3.target
    target.prepare(SCHEMA)
    assert target.commit(0, rows(0, 9), overwrite=False)
    assert not target.commit(0, rows(0, 9), overwrite=False)
    files = on_s3.load_table().inspect.files().column("file_path").to_pylist()
    assert files and all(f.startswith(f"s3://{BUCKET}/wh-{tmp_path.name}/") for f in files)
    assert sorted(on_s3.read().column("id").to_pylist()) == list(range(9))
    assert not list(tmp_path.rglob("*.parquet")), "no data file on the local disk"


def test_a_sql_catalog_on_postgresql_recognises_a_replayed_batch(tmp_path: Path) -> None:
    """A SQL catalog on a real PostgreSQL server (Debian's, on loopback), through SQLAlchemy."""
    from pyiceberg.catalog import load_catalog

    from testcluster.postgres import PostgresServer

    with PostgresServer() as server:
        uri = f"postgresql+psycopg://{server.user}@127.0.0.1:{server.port}/{server.database}"
        catalog = {"name": "pg", "uri": uri, "warehouse": str(tmp_path / "wh")}
        target = Iceberg("web.clicks", catalog=catalog, name="clicks").with_defaults(run="r1")
        target.target.prepare(SCHEMA)
        assert target.target.commit(0, rows(0, 10), overwrite=False) is True
        assert target.target.commit(1, rows(10, 5), overwrite=False) is True
        assert target.target.commit(1, rows(10, 5), overwrite=False) is False  # a replay

        # A new process's view: a fresh catalog on the same database.
        again = load_catalog("pg", uri=uri, warehouse=str(tmp_path / "wh"))
        table = again.load_table("web.clicks")
        assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(15))
        assert [snapshots_of(table, b) for b in (0, 1)] == [1, 1]
        assert Iceberg("web.clicks", catalog=catalog, name="clicks").last_committed_batch() == 1
