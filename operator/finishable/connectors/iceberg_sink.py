"""The Iceberg sink a program declares (``sinks.Iceberg``): exactly-once commits into a table.

Rows are staged like the other two-phase sinks'; the driver's commit of each micro-batch (with
pyiceberg, no Spark) is :mod:`finishable.connectors.iceberg`, the writer Spark runs
``connectors.streaming.iceberg_writer``. The catalogue :mod:`finishable.connectors.sinks` lists it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from finishable.connectors.iceberg import (
    IcebergTarget,
    catalog_properties,
    validate_mode,
    validate_table_name,
)
from finishable.connectors.iceberg_schema import IcebergConfigError, parse_partition
from finishable.connectors.sentinels import SENTINEL_COLUMN
from finishable.connectors.sink_store import (
    DEFAULT_SINK_NAME,
    SinkError,
    SinkStore,
    display_location,
    validate_sink_name,
)
from finishable.connectors.streaming.iceberg_writer import IcebergDataSource

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.readwriter import DataStreamWriter


@dataclass(frozen=True)
class Iceberg:
    """Exactly-once into an Apache Iceberg table (``namespace.table``), with pyiceberg.

    Executors stage each micro-batch as Arrow IPC under ``staging_url``; once per micro-batch the
    driver side commits the batch's rows to the table in one catalog commit whose snapshot summary
    records ``finishable.sink``, ``finishable.batch-id`` and ``finishable.run``, so a replay after
    a crash is recognised and skipped (``connectors.iceberg``). ``mode="append"`` adds each batch;
    ``"overwrite"`` replaces the table's rows with each batch (the last micro-batch's result; in a
    Batch job, the job's output), and so does Spark's complete output mode. The catalog is
    ``catalog`` (pyiceberg catalog properties: REST, Glue, Hive, SQL...; ``"name"`` sets the
    catalog's name, default ``finishable``), else a SQL catalog on SQLite in
    ``<warehouse>/catalog.db`` with the data under ``warehouse`` (a local directory; in a
    ``FinishableJob`` with local state it defaults to ``<job dir>/iceberg``). A missing table is
    created from the DataFrame's schema (every column optional), partitioned by ``partition_by``
    (``"col"``, ``"day(ts)"``, ``"bucket(16, user)"``...); an existing one is checked against the
    DataFrame before the query runs. The commit passes each batch through the memory of the
    driver's machine once.
    """

    table: str
    catalog: Mapping[str, str] | None = None
    warehouse: str | None = None
    mode: str = "append"
    partition_by: Sequence[str] = ()
    name: str | None = None
    staging_url: str | None = None
    run: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        validate_table_name(self.table)
        validate_mode(self.mode)
        if isinstance(self.partition_by, str):
            raise IcebergConfigError(
                f"partition_by must be a list of entries, got the string {self.partition_by!r}: "
                f"write partition_by=[{self.partition_by!r}]"
            )
        for entry in self.partition_by:
            parse_partition(entry)
        object.__setattr__(self, "partition_by", tuple(self.partition_by))
        object.__setattr__(self, "catalog", None if self.catalog is None else dict(self.catalog))
        if self.name is not None:
            validate_sink_name(self.name)
        if self.catalog is not None or self.warehouse is not None:
            catalog_properties(self.catalog, self.warehouse)  # refuse a bad one now
        if self.staging_url is not None:
            object.__setattr__(self, "staging_url", SinkStore(self.staging_url, self.sink_name).url)

    @property
    def sink_name(self) -> str:
        return self.name or DEFAULT_SINK_NAME

    def with_defaults(
        self,
        *,
        name: str | None = None,
        staging_url: str | None = None,
        warehouse: str | None = None,
        run: str = "",
    ) -> Iceberg:
        """A copy with unset fields filled in (the job runtime knows where it may keep files)."""
        return dataclasses.replace(
            self,
            name=self.name or name,
            staging_url=self.staging_url or staging_url,
            warehouse=self.warehouse or (None if self.catalog is not None else warehouse),
            run=self.run or run,
        )

    @property
    def target(self) -> IcebergTarget:
        catalog_name, properties = catalog_properties(self.catalog, self.warehouse)
        return IcebergTarget(
            table=self.table,
            catalog_name=catalog_name,
            properties=tuple(sorted(properties.items())),
            sink=self.sink_name,
            partition_by=tuple(parse_partition(entry) for entry in self.partition_by),
            run=self.run,
        )

    @property
    def store(self) -> SinkStore:
        if self.staging_url is None:
            raise SinkError(
                f"Iceberg sink {self.sink_name!r} needs staging_url, a location every executor "
                "and the driver can reach (run it through FinishableJob to get one)"
            )
        return SinkStore(self.staging_url, self.sink_name)

    def options(self) -> dict[str, str]:
        return {
            "url": self.store.url,
            "sink": self.sink_name,
            "iceberg": self.target.to_json(),
            "mode": self.mode,
        }

    def fingerprint(self) -> dict[str, str]:
        _, properties = catalog_properties(self.catalog, self.warehouse)
        return {
            "kind": "Iceberg",
            "table": self.table,
            "catalog": display_location(properties.get("uri", properties.get("type", ""))),
            "mode": self.mode,
            "sink": self.sink_name,
        }

    def prepare(self, df: DataFrame) -> Table:
        """Create the table if missing, else check that ``df`` fits it (before the query runs)."""
        from pyspark.sql.pandas.types import to_arrow_schema  # noqa: PLC0415

        schema = to_arrow_schema(df.schema, timezone="UTC")
        index = schema.get_field_index(SENTINEL_COLUMN)
        if index >= 0:
            schema = schema.remove(index)
        shown = {f.name: f.dataType.simpleString() for f in df.schema.fields}
        return self.target.prepare(schema, shown)

    def write_stream(self, df: DataFrame) -> DataStreamWriter:
        """``df.writeStream`` aimed at this sink, once the table fits ``df``."""
        self.prepare(df)
        df.sparkSession.dataSource.register(IcebergDataSource)
        self.store.probe()
        return df.writeStream.format(IcebergDataSource.name()).options(**self.options())

    def clean_staging(self) -> None:
        self.store.delete_all_staging()

    def finish(self) -> None:
        """Nothing to flush: each micro-batch is committed by its own commit."""

    def committed_batches(self) -> list[int]:
        """This sink's batch ids found in the table's snapshot history."""
        return self.target.committed_batches()

    def last_committed_batch(self) -> int | None:
        return self.target.last_committed()

    def load_table(self) -> Table:
        """The pyiceberg table (e.g. ``.scan().to_arrow()``); an error while it does not exist."""
        table = self.target.load()
        if table is None:
            raise SinkError(f"Iceberg table {self.table!r} does not exist (yet)")
        return table

    def read(self) -> pa.Table:
        """Every row of the table's current snapshot."""
        return self.load_table().scan().to_arrow()
