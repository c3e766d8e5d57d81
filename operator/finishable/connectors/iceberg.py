"""Exactly-once commits into an Apache Iceberg table, with pyiceberg (no Spark in this module).

The Iceberg sink (``sinks.Iceberg``) stages rows like the other two-phase sinks; its publish step
is one Iceberg catalog commit per micro-batch (or per Batch job) that appends (or overwrites) the
batch's rows and records ``finishable.sink``, ``finishable.batch-id`` and ``finishable.run`` in the
new snapshot's summary, plus the table property ``finishable.sink.<name>.last-batch-id`` in the
same commit. The catalog commit is atomic, so a batch is either wholly in the table or not at all;
before committing, the committer looks for the batch in the properties and in the summaries of the
current branch's snapshots, so a replay after a crash (Spark re-running a batch whose commit-log
entry is missing, or a Batch driver re-running its final commit) is recognised and skipped. The
property survives ``expire_snapshots``; the summaries tell a reader which batch made a snapshot.

pyiceberg is an optional dependency (the ``iceberg`` extra): it is imported where it is used, and
a missing install is a clear error naming the extra.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

import pyarrow as pa

from finishable.connectors.iceberg_schema import (
    IcebergConfigError,
    PartitionField,
    check_schema,
    conform,
)
from finishable.connectors.sink_store import SinkError

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

EXTRA: Final = "finishable-spark-operator[iceberg]"
SINK_KEY: Final = "finishable.sink"
BATCH_KEY: Final = "finishable.batch-id"
RUN_KEY: Final = "finishable.run"
MODES: Final = ("append", "overwrite")
DEFAULT_CATALOG_NAME: Final = "finishable"
CATALOG_FILE: Final = "catalog.db"
PAUSE_ENV: Final = "FINISHABLE_ICEBERG_PAUSE"
"""A test fault point: a directory. When ``<dir>/<sink>-<batch>.hold`` exists, the committer of
that batch writes ``<sink>-<batch>.paused`` once the batch's data and manifest files are written,
and waits before the catalog commit while the hold file is there (at most ``PAUSE_LIMIT``
seconds). Crash tests SIGKILL the driver in that window, then remove the hold file."""
PAUSE_LIMIT: Final = 300.0
COMMIT_TRIES: Final = 5
_NAME_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]*$")


def require_pyiceberg() -> None:
    """Fail with the name of the extra to install when pyiceberg is missing."""
    try:
        import pyiceberg  # noqa: F401, PLC0415 - optional dependency
    except ImportError:
        raise IcebergConfigError(
            f"sinks.Iceberg needs pyiceberg: pip install '{EXTRA}' (pyiceberg with its SQL "
            "catalog and partition transforms)"
        ) from None


# --- validation of what the user wrote -----------------------------------------------------------


def validate_table_name(table: str) -> tuple[str, ...]:
    """``namespace.table`` (nested namespaces allowed): the identifier's parts."""
    parts = tuple(table.split(".")) if isinstance(table, str) else ()
    if len(parts) < 2 or not all(_NAME_PART.fullmatch(part) for part in parts):
        raise IcebergConfigError(
            f"invalid Iceberg table {table!r}: use 'namespace.table' (more dots for nested "
            "namespaces), each part of A-Z, a-z, 0-9, '_' and '-', starting with a letter, digit "
            "or '_'"
        )
    return parts


def validate_mode(mode: str) -> str:
    if mode not in MODES:
        raise IcebergConfigError(
            f"unknown Iceberg mode {mode!r}: use " + " or ".join(repr(m) for m in MODES)
        )
    return mode


def catalog_properties(
    catalog: Mapping[str, str] | None, warehouse: str | None
) -> tuple[str, dict[str, str]]:
    """The catalog's name and pyiceberg properties: the user's, else SQLite beside ``warehouse``.

    Without ``catalog``, a SQL catalog on SQLite lives in ``<warehouse>/catalog.db``; that needs a
    local ``warehouse`` (SQLite is a local file). A ``warehouse`` given with ``catalog`` is added
    to the catalog's properties unless they name one.
    """
    if catalog is not None:
        if not isinstance(catalog, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in catalog.items()
        ):
            raise IcebergConfigError(
                f"catalog must be a dict of pyiceberg catalog properties (str to str), got "
                f"{catalog!r}"
            )
        properties = dict(catalog)
        name = properties.pop("name", DEFAULT_CATALOG_NAME)
        if warehouse and "warehouse" not in properties:
            properties["warehouse"] = _warehouse_url(warehouse)
        if "uri" not in properties and "type" not in properties:
            raise IcebergConfigError(
                f"catalog {_shown(properties)} names neither 'uri' nor 'type': pyiceberg cannot "
                "tell which catalog to use (e.g. {'uri': 'sqlite:////data/catalog.db', "
                "'warehouse': 's3://bucket/warehouse'} or {'type': 'rest', 'uri': 'https://...'})"
            )
        return name, properties
    if not warehouse:
        raise IcebergConfigError(
            "sinks.Iceberg needs warehouse= (a local directory for the default SQLite catalog "
            "and the data) or catalog= (pyiceberg catalog properties)"
        )
    scheme = urlsplit(warehouse).scheme.lower()
    if scheme not in ("", "file"):
        raise IcebergConfigError(
            f"warehouse {warehouse!r} is not a local directory, so the default SQLite catalog "
            "has nowhere to live: pass catalog={'uri': 'sqlite:////local/path/catalog.db', ...} "
            "(or any pyiceberg catalog) together with this warehouse"
        )
    root = Path(urlsplit(warehouse).path if scheme == "file" else warehouse).resolve()
    return DEFAULT_CATALOG_NAME, {
        "type": "sql",
        "uri": f"sqlite:///{root / CATALOG_FILE}",
        "warehouse": root.as_uri(),
    }


def _warehouse_url(warehouse: str) -> str:
    return warehouse if urlsplit(warehouse).scheme else Path(warehouse).resolve().as_uri()


def _shown(properties: Mapping[str, str]) -> str:
    """Catalog properties for a message: no secrets."""
    hidden = ("secret", "password", "token", "credential", "key")
    return str(
        {k: "***" if any(h in k.lower() for h in hidden) else v for k, v in properties.items()}
    )


# --- the table -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class IcebergTarget:
    """One sink's table: where it is, how it is partitioned, and the exactly-once commit."""

    table: str
    catalog_name: str
    properties: tuple[tuple[str, str], ...]
    sink: str
    partition_by: tuple[PartitionField, ...] = ()
    run: str = ""

    def to_json(self) -> str:
        """For a Spark option: the streaming commit runs in a worker that rebuilds everything."""
        return json.dumps(
            {
                "table": self.table,
                "catalog_name": self.catalog_name,
                "properties": dict(self.properties),
                "sink": self.sink,
                "partition_by": [[p.source, p.transform, p.param] for p in self.partition_by],
                "run": self.run,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> IcebergTarget:
        data = json.loads(text)
        return cls(
            table=data["table"],
            catalog_name=data["catalog_name"],
            properties=tuple(sorted(data["properties"].items())),
            sink=data["sink"],
            partition_by=tuple(PartitionField(s, t, p) for s, t, p in data["partition_by"]),
            run=data["run"],
        )

    @property
    def marker_key(self) -> str:
        """The table property holding this sink's last committed batch id."""
        return f"finishable.sink.{self.sink}.last-batch-id"

    def catalog(self) -> Catalog:
        require_pyiceberg()
        from pyiceberg.catalog import load_catalog  # noqa: PLC0415 - optional dependency

        properties = dict(self.properties)
        uri = properties.get("uri", "")
        if uri.startswith("sqlite:///"):
            Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        try:
            return load_catalog(self.catalog_name, **properties)
        except Exception as error:
            raise SinkError(
                f"cannot open the Iceberg catalog {_shown(properties)} for table {self.table!r}: "
                f"{type(error).__name__}: {error}"
            ) from error

    def load(self) -> Table | None:
        """The table, or ``None`` while it does not exist."""
        from pyiceberg.exceptions import NoSuchTableError  # noqa: PLC0415

        catalog = self.catalog()
        try:
            return catalog.load_table(self.table)
        except NoSuchTableError:
            return None

    def prepare(self, schema: pa.Schema, shown_types: Mapping[str, str] | None = None) -> Table:
        """The table, created from ``schema`` if missing; refuses a DataFrame that does not fit.

        A created table has every column optional (a later DataFrame that differs only in
        nullability still fits) and is partitioned by ``partition_by``. An existing table is
        checked: column names, types (or a safe promotion), nullability, and its partitioning
        when ``partition_by`` is given.
        """
        shown = dict(shown_types or {})
        for field in self.partition_by:
            if field.source not in schema.names:
                raise IcebergConfigError(
                    f"partition_by {field.transform}({field.source}) of Iceberg table "
                    f"{self.table!r}: the DataFrame has no column {field.source!r} (its columns: "
                    f"{', '.join(schema.names)})"
                )
        table = self.load()
        if table is None:
            table = self._create(schema)
        check_schema(self.table, table.schema(), schema, shown)
        if self.partition_by:
            self._check_partitioning(table)
        return table

    def _create(self, schema: pa.Schema) -> Table:
        from pyiceberg.exceptions import TableAlreadyExistsError  # noqa: PLC0415

        catalog = self.catalog()
        namespace = tuple(self.table.split(".")[:-1])
        catalog.create_namespace_if_not_exists(namespace)
        optional = pa.schema([f.with_nullable(True) for f in schema])
        try:
            transaction = catalog.create_table_transaction(self.table, schema=optional)
            if self.partition_by:
                with transaction.update_spec() as spec:
                    for field in self.partition_by:
                        spec.add_field(field.source, field.build())
            transaction.commit_transaction()
        except TableAlreadyExistsError:
            log.info("Iceberg table %s was created concurrently: using it", self.table)
        except ValueError as error:  # what pyiceberg raises for a name its catalog cannot hold
            raise IcebergConfigError(
                f"the Iceberg catalog cannot create table {self.table!r}: {error}"
            ) from None
        else:
            log.info(
                "created Iceberg table %s (partitioned by %s)",
                self.table,
                [f"{f.transform}({f.source})" for f in self.partition_by] or "nothing",
            )
        return catalog.load_table(self.table)

    def _check_partitioning(self, table: Table) -> None:
        schema = table.schema()
        have = [
            (schema.find_column_name(f.source_id) or "?", str(f.transform))
            for f in table.spec().fields
        ]
        want = [f.key() for f in self.partition_by]
        if have != want:
            raise IcebergConfigError(
                f"Iceberg table {self.table!r} is partitioned by {_spec_text(have)}, but the sink "
                f"asks for {_spec_text(want)}: change partition_by to match the table (or leave "
                "it out), or evolve the table's partitioning first"
            )

    # -- exactly-once ------------------------------------------------------------------------

    def committed_batches(self, table: Table | None = None) -> list[int]:
        """This sink's batch ids in the current branch's snapshot summaries, ascending."""
        table = table if table is not None else self.load()
        if table is None:
            return []
        return sorted(
            {
                int(summary[BATCH_KEY])
                for summary in _summaries(table)
                if summary.get(SINK_KEY) == self.sink and BATCH_KEY in summary
            }
        )

    def last_committed(self, table: Table | None = None) -> int | None:
        """The highest batch id committed by this sink (property or snapshot summary)."""
        table = table if table is not None else self.load()
        if table is None:
            return None
        candidates = self.committed_batches(table)
        marker = table.properties.get(self.marker_key)
        if marker is not None and marker.isdigit():
            candidates.append(int(marker))
        return max(candidates) if candidates else None

    def is_committed(self, batch_id: int, table: Table | None = None) -> bool:
        table = table if table is not None else self.load()
        if table is None:
            return False
        marker = table.properties.get(self.marker_key)
        if marker is not None and marker.isdigit() and batch_id <= int(marker):
            return True
        return batch_id in self.committed_batches(table)

    def commit(self, batch_id: int, data: pa.Table, *, overwrite: bool) -> bool:
        """Commit ``data`` as batch ``batch_id`` once; ``False`` if it was already committed.

        ``overwrite`` deletes the table's rows in the same commit. A concurrent commit by another
        writer makes the catalog refuse ours: the table is reloaded and the check and commit
        retried.
        """
        from pyiceberg.exceptions import CommitFailedException  # noqa: PLC0415
        from pyiceberg.expressions import AlwaysTrue  # noqa: PLC0415

        for attempt in range(1, COMMIT_TRIES + 1):
            table = self.load() or self._create(data.schema)
            if self.is_committed(batch_id, table):
                log.info(
                    "batch %d of sink %s is already in Iceberg table %s: replay skipped",
                    batch_id,
                    self.sink,
                    self.table,
                )
                return False
            rows = conform(data, table.schema())
            transaction = table.transaction()
            current = table.current_snapshot()
            if overwrite and current is not None and _total_records(current.summary) != 0:
                transaction.delete(AlwaysTrue())
            properties = {SINK_KEY: self.sink, BATCH_KEY: str(batch_id), RUN_KEY: self.run}
            transaction.append(rows, snapshot_properties=properties)
            transaction.set_properties({self.marker_key: str(batch_id)})
            _pause_point(self.sink, batch_id)
            try:
                transaction.commit_transaction()
            except CommitFailedException as error:
                if attempt == COMMIT_TRIES:
                    raise SinkError(
                        f"Iceberg table {self.table!r} refused the commit of batch {batch_id} "
                        f"{COMMIT_TRIES} times (concurrent writers?): {error}"
                    ) from error
                log.warning("commit of batch %d to %s conflicted: retrying", batch_id, self.table)
                continue
            log.info(
                "committed batch %d of sink %s to Iceberg table %s: %d rows (%s)",
                batch_id,
                self.sink,
                self.table,
                rows.num_rows,
                "overwrite" if overwrite else "append",
            )
            return True
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def _summaries(table: Table) -> Iterator[Mapping[str, str]]:
    """The summaries of the current snapshot and its ancestors (the main branch's history)."""
    snapshot = table.current_snapshot()
    seen: set[int] = set()
    while snapshot is not None and snapshot.snapshot_id not in seen:
        seen.add(snapshot.snapshot_id)
        summary = snapshot.summary
        if summary is not None:
            yield summary.additional_properties
        parent = snapshot.parent_snapshot_id
        snapshot = table.snapshot_by_id(parent) if parent is not None else None


def _total_records(summary: Any) -> int:
    if summary is None:
        return -1
    value = summary.additional_properties.get("total-records")
    return int(value) if value is not None and value.isdigit() else -1


def _spec_text(fields: Sequence[tuple[str, str]]) -> str:
    return "[" + ", ".join(f"{t}({s})" for s, t in fields) + "]" if fields else "nothing"


def _pause_point(sink: str, batch_id: int) -> None:
    directory = os.environ.get(PAUSE_ENV)
    if not directory:
        return
    hold = Path(directory) / f"{sink}-{batch_id}.hold"
    if not hold.exists():
        return
    (Path(directory) / f"{sink}-{batch_id}.paused").write_text(str(os.getpid()))
    log.warning("%s: batch %d written, held before the catalog commit", PAUSE_ENV, batch_id)
    deadline = time.monotonic() + PAUSE_LIMIT
    while hold.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
