"""Windowed page-view counts exactly once into PostgreSQL: the pattern for any database.

The sink is ``sinks.TransactionalCallback(commit)``: executors stage each micro-batch, then
``commit(batch_id, rows)`` runs once per batch, and runs again with the same batch id and the same
rows when a driver died after the database committed but before Spark recorded the batch. So
``commit`` writes the rows and the batch id in ONE transaction, and the batch id's primary key lets
only the first one in: a replay (or a second driver racing the first) commits nothing. Any
database with transactions and a unique key can do the same; the rows need no key of their own.

Run it with ``finishable run examples/streaming/postgres.yaml --fresh`` and the database in
``POSTGRES_DSN`` (a libpq connection string; empty means libpq's defaults: PGHOST, PGPORT, PGUSER,
PGDATABASE, PGPASSWORD...). On a cluster the password is a file of a mounted Secret
(``--password-file``, examples/streaming/platform.yaml), read at every connection, so a rotated
Secret applies without a restart; it is never in the job's arguments.

Batch ids count from 0 again in a new checkpoint lineage (``--fresh``, a new job): give such a
run a new ``--sink`` name, or empty the table and the sink's rows of ``finishable_batches``, or
its batches would be taken for replays and skipped.
"""

from __future__ import annotations

import argparse
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pyarrow as pa
from clickstream import SCHEMA, generate  # next to this file: on sys.path as the script's dir
from psycopg import sql
from pyspark.sql import functions as F  # noqa: N812 - PySpark's convention

from finishable import FinishableJob, sinks, sources

BATCHES_TABLE = "finishable_batches"
COLUMNS = ("window_start", "window_end", "page", "views")


@dataclass(frozen=True)
class PostgresCommit:
    """``commit(batch_id, rows)`` for ``TransactionalCallback``: ``rows`` into ``table``, exactly
    once per (``sink``, batch id).

    A plain picklable object (the sink ships it to the Spark Python worker that calls it): it
    keeps no connection, since each call may run in a new worker.
    """

    dsn: str
    table: str
    sink: str
    password_file: str = ""

    def connect(self) -> psycopg.Connection[tuple[object, ...]]:
        """A connection, with the password from ``password_file`` when there is one."""
        secret = Path(self.password_file).read_text().strip() if self.password_file else None
        password = {"password": secret} if secret else {}
        return psycopg.connect(self.dsn, autocommit=True, **password)

    def create_tables(self) -> None:
        """The output table and the batch ledger, if missing (run by the driver at start)."""
        with self.connect() as conn:
            conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (window_start timestamptz NOT NULL, "
                    "window_end timestamptz NOT NULL, page text NOT NULL, views bigint NOT NULL, "
                    "batch_id bigint NOT NULL)"
                ).format(sql.Identifier(self.table))
            )
            # The ledger: its primary key is what turns an at-least-once call into exactly-once.
            conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (sink text NOT NULL, batch_id bigint NOT NULL, "
                    "row_count bigint NOT NULL, committed_at timestamptz NOT NULL DEFAULT now(), "
                    "PRIMARY KEY (sink, batch_id))"
                ).format(sql.Identifier(BATCHES_TABLE))
            )

    def __call__(self, batch_id: int, rows: pa.Table) -> None:
        with self.connect() as conn, conn.transaction():
            # Claim the batch first: a concurrent claim of the same id waits on this row's lock
            # and then finds it taken, so two drivers can never both write a batch.
            claimed = conn.execute(
                sql.SQL(
                    "INSERT INTO {} (sink, batch_id, row_count) VALUES (%s, %s, %s) "
                    "ON CONFLICT DO NOTHING"
                ).format(sql.Identifier(BATCHES_TABLE)),
                (self.sink, batch_id, rows.num_rows),
            ).rowcount
            if claimed == 0:
                return  # a replay: this batch's rows were committed with its id
            copy_rows = sql.SQL("COPY {} ({}) FROM STDIN").format(
                sql.Identifier(self.table),
                sql.SQL(", ").join(map(sql.Identifier, (*COLUMNS, "batch_id"))),
            )
            with conn.cursor().copy(copy_rows) as copy:
                for row in zip(*(rows.column(c).to_pylist() for c in COLUMNS), strict=True):
                    copy.write_row((*row, batch_id))
        # Leaving the transaction committed the rows and the claim together, or neither.


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--input", required=True, help="directory (or URL) of clicks-*.json")
    parser.add_argument(
        "--dsn",
        default=os.environ.get("POSTGRES_DSN", ""),
        help="libpq connection string (default: $POSTGRES_DSN); keep passwords in PGPASSWORD "
        "or PGPASSFILE, which the Spark workers inherit, rather than in job arguments",
    )
    parser.add_argument(
        "--password-file",
        default=os.environ.get("POSTGRES_PASSWORD_FILE", ""),
        help="a file holding the password (a mounted Secret's; default: $POSTGRES_PASSWORD_FILE)",
    )
    parser.add_argument("--table", default="page_views", help="the output table")
    parser.add_argument("--sink", default="page_views", help="the batches' key in the ledger")
    parser.add_argument("--files", type=int, default=0, help="generate this many files first")
    parser.add_argument("--rows", type=int, default=2000, help="clicks per generated file")
    parser.add_argument("--files-per-batch", type=int, default=2, help="files per micro-batch")
    parser.add_argument(
        "--unbounded",
        action="store_true",
        help="keep reading new files until the job is stopped (else end after those there are)",
    )
    return parser.parse_args()


def main() -> None:
    args = arguments()
    generate(Path(args.input), args.files, args.rows, 0.0, threading.Event())
    commit = PostgresCommit(args.dsn, args.table, args.sink, args.password_file)
    commit.create_tables()

    job = FinishableJob.from_env()
    clicks = job.read_stream(
        sources.Files(
            args.input,
            format="json",
            schema=SCHEMA,
            bounded=not args.unbounded,
            discovery_interval="1s",
            max_splits_per_batch=args.files_per_batch,
        ),
        name="clicks",
    )
    # Append mode: a window is emitted once, when the watermark passes it. In complete mode each
    # batch is the whole result: delete the table's rows in the same transaction, then insert.
    counts = (
        clicks.withWatermark("ts", "1 minute")
        .groupBy(F.window("ts", "1 minute"), "page")
        .count()
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "page",
            F.col("count").alias("views"),
        )
    )
    job.write_stream(counts, sinks.TransactionalCallback(commit, name=args.sink))
    job.run()


if __name__ == "__main__":
    main()
