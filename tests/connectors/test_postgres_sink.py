"""The PostgreSQL example (``examples/streaming/postgres.py``) is exactly once: a real server on
loopback, the example run by `finishable run`, its driver SIGKILLed at random moments, inside a
commit's transaction and between the database's commit and its acknowledgement, and the table
compared with a pandas ground truth computed from the same input files.

The commit is the pattern for any database: the micro-batch's rows and its batch id in one
transaction, the batch id's primary key letting only the first one in.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import random
import re
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow as pa
import pytest
import yaml

from testcluster.postgres import PostgresServer
from tests.driver.test_streaming_job import ROOT, Job, ground_truth, write_clicks

pytestmark = [
    pytest.mark.full,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Debian's PostgreSQL"),
]

EXAMPLES = ROOT / "examples" / "streaming"
MANIFEST = EXAMPLES / "postgres.yaml"
SINK = "page_views"
log = logging.getLogger(__name__)


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    with PostgresServer() as server:
        yield server


@pytest.fixture
def dsn(postgres: PostgresServer, request: pytest.FixtureRequest) -> str:
    """A new database per test, so that each starts with no table and no batch."""
    import psycopg

    name = "t_" + "".join(c if c.isalnum() else "_" for c in request.node.name)[:50].lower()
    with psycopg.connect(postgres.dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"{postgres.dsn.rsplit(' dbname=', 1)[0]} dbname={name}"


@pytest.fixture(scope="module")
def example() -> Iterator[ModuleType]:
    """The example program as a module (its directory on sys.path, as when it runs)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(EXAMPLES))
        yield importlib.import_module("postgres")


@pytest.fixture
def jobs() -> Iterator[list[Job]]:
    started: list[Job] = []
    yield started
    for job in started:
        job.cleanup()


class ExampleJob(Job):
    """``examples/streaming/postgres.yaml`` as shipped, with its input and database replaced."""

    def __init__(self, tmp: Path, name: str, dsn: str, *args: str) -> None:
        super().__init__(tmp, name)
        document = yaml.safe_load(MANIFEST.read_text())
        document["metadata"]["name"] = name
        application = document["spec"]["application"]
        application["file"] = str(EXAMPLES / application["file"])
        shipped = [a for a in application["args"] if not a.startswith("--input=")]
        application["args"] = [f"--input={self.input}", f"--dsn={dsn}", *shipped, *args]
        document["spec"]["recovery"] = {"maxAttempts": 8}
        self.manifest.write_text(yaml.safe_dump(document))

    def kill_driver_group(self) -> int:
        """SIGKILL the driver, its JVM and Python workers at once (a driver pod dying)."""
        attempt = int(self.status().get("attempt", 0))
        os.killpg(self.driver_pid(), signal.SIGKILL)
        return attempt

    def wait_next_attempt(self, killed: int) -> None:
        self.wait(
            f"the attempt after {killed}",
            lambda s: s.get("attempt", 0) > killed and s.get("phase") == "Running",
        )


# -- reading the database --------------------------------------------------------------------


def query(dsn: str, statement: str, *params: Any) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        cursor = conn.execute(statement, params or None)
        return cursor.fetchall() if cursor.description is not None else []


def wait_db(
    dsn: str, what: str, accept: Callable[[], bool], job: Job | None = None, timeout: float = 600
) -> None:
    """Poll the database until ``accept`` (the program creates the tables when it starts); fail
    early if the job's runner ended."""
    import psycopg

    def accepted() -> bool:
        try:
            return accept()
        except psycopg.errors.UndefinedTable:
            return False

    deadline = time.monotonic() + timeout
    while not accepted():
        if job is not None and job.runner is not None and job.runner.poll() is not None:
            raise AssertionError(f"the runner ended before {what}{job.driver_logs()}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}" + (
            job.driver_logs() if job else ""
        )
        time.sleep(0.02)


def ledger(dsn: str) -> list[tuple[int, int]]:
    """(batch id, row count) of every batch the sink committed."""
    rows = query(
        dsn, "SELECT batch_id, row_count FROM finishable_batches WHERE sink = %s ORDER BY 1", SINK
    )
    return [(int(b), int(n)) for b, n in rows]


def table_counts(dsn: str) -> dict[tuple[datetime, str], int]:
    """The table as {(window start, page): views}; a window stored twice fails here."""
    rows = query(dsn, "SELECT window_start, window_end, page, views FROM page_views")
    keys = Counter((start.astimezone(UTC), page) for start, _end, page, _views in rows)
    duplicates = [key for key, seen in keys.items() if seen > 1]
    assert not duplicates, f"windows stored twice: {duplicates[:5]}"
    assert all(end - start == timedelta(minutes=1) for start, end, _page, _views in rows)
    return {(start.astimezone(UTC), page): int(views) for start, _end, page, views in rows}


@contextlib.contextmanager
def commits_wait_for_a_standby(dsn: str) -> Iterator[None]:
    """While inside, every commit on the server is made durable and then waits for a synchronous
    standby that does not exist, unseen by other sessions; leaving releases (commits) them."""

    def configure(names: str) -> None:
        statement = "RESET synchronous_standby_names"
        if names:
            statement = f"SET synchronous_standby_names = '{names}'"
        query(dsn, f"ALTER SYSTEM {statement}")  # not in a transaction, so not with the next
        query(dsn, "SELECT pg_reload_conf()")
        wait_db(
            dsn,
            f"synchronous_standby_names = {names!r}",
            lambda: query(dsn, "SHOW synchronous_standby_names") == [(names,)],
        )

    configure("nowhere")
    try:
        yield
    finally:
        configure("")


def replayed_batches(job: Job) -> dict[int, int]:
    """{attempt: the batch it replayed from stored offsets}, from the drivers' logs."""
    replays: dict[int, int] = {}
    for path in (job.state / job.name).glob("driver-*.log"):
        found = re.search(r"batch (\d+) will replay from its stored offsets", path.read_text())
        if found is not None:
            replays[int(path.stem.split("-")[1])] = int(found[1])
    return replays


def assert_ledger_matches_table(dsn: str) -> list[tuple[int, int]]:
    """Every batch id once, contiguous from 0, and each batch's rows in the table once."""
    batches = ledger(dsn)
    assert [b for b, _ in batches] == list(range(len(batches))), batches
    per_batch = dict(query(dsn, "SELECT batch_id, count(*) FROM page_views GROUP BY 1"))
    assert {b: n for b, n in batches if n} == {int(b): int(n) for b, n in per_batch.items()}
    return batches


# -- the tests -------------------------------------------------------------------------------


def test_commit_is_idempotent_per_batch_and_atomic(example: ModuleType, dsn: str) -> None:
    commit = example.PostgresCommit(dsn, "page_views", SINK)
    other = example.PostgresCommit(dsn, "page_views", "another-sink")
    commit.create_tables()
    commit.create_tables()  # every driver attempt runs it

    start = datetime(2026, 1, 1, tzinfo=UTC)
    minute = timedelta(minutes=1)

    def rows(pages: list[str | None], views: int) -> pa.Table:
        return pa.table(
            {
                "window_start": pa.array([start] * len(pages), pa.timestamp("us", tz="UTC")),
                "window_end": pa.array([start + minute] * len(pages), pa.timestamp("us", "UTC")),
                "page": pa.array(pages, pa.string()),
                "views": pa.array([views] * len(pages), pa.int64()),
            }
        )

    commit(0, rows(["home", "cart"], 3))
    commit(0, rows(["home", "cart"], 3))  # a replay after a crash: nothing changes
    assert ledger(dsn) == [(0, 2)]
    assert table_counts(dsn) == {(start, "home"): 3, (start, "cart"): 3}

    # The same batch id of another sink is another batch.
    other(0, rows(["search"], 5))
    assert table_counts(dsn) == {(start, "home"): 3, (start, "cart"): 3, (start, "search"): 5}

    # A failure half way through the rows (a NULL page breaks NOT NULL) leaves no row and no
    # claim, so the retry writes the batch.
    import psycopg

    with pytest.raises(psycopg.errors.NotNullViolation):
        commit(1, rows(["checkout", None], 7))
    assert ledger(dsn) == [(0, 2)]
    assert (start, "checkout") not in table_counts(dsn)
    commit(1, rows(["checkout"], 7))
    commit(1, rows(["checkout"], 7))
    assert ledger(dsn) == [(0, 2), (1, 1)]
    assert table_counts(dsn)[start, "checkout"] == 7

    # An empty micro-batch is recorded too (every batch is delivered, empty ones included).
    commit(2, rows([], 0))
    assert ledger(dsn) == [(0, 2), (1, 1), (2, 0)]
    assert len(table_counts(dsn)) == 4


def test_the_shipped_example_fills_the_table_with_the_ground_truth(
    tmp_path: Path, dsn: str, jobs: list[Job]
) -> None:
    job = ExampleJob(tmp_path, "pg-bounded", dsn)
    jobs.append(job)
    job.run()
    output = job.finish(timeout=600)
    assert "Finished" in output, output
    status = job.status()
    assert status["phase"] == "Finished" and status["restarts"] == 0

    truth = ground_truth(job.input)  # pandas over the files the program generated
    assert len(list(job.input.glob("clicks-*.json"))) == 12
    assert table_counts(dsn) == truth
    assert sum(truth.values()) == 12 * 2000
    batches = assert_ledger_matches_table(dsn)
    assert sum(n for _, n in batches) == len(truth)


def test_driver_killed_at_random_moments_and_inside_commits_is_exactly_once(
    tmp_path: Path, dsn: str, jobs: list[Job]
) -> None:
    import psycopg

    seed = int(os.environ.get("FINISHABLE_CRASH_SEED", time.time_ns() % 100_000))
    rng = random.Random(seed)
    log.info("crash test seed %d (set FINISHABLE_CRASH_SEED to replay it)", seed)
    job = ExampleJob(tmp_path, "pg-crashes", dsn, "--files=0", "--unbounded", "--files-per-batch=1")
    jobs.append(job)
    files = 3
    for index in range(files):
        write_clicks(job.input, index)
    job.run()
    in_database: list[int] = []  # per kill: how many batches PostgreSQL had committed

    def add_file() -> None:
        nonlocal files
        write_clicks(job.input, files)
        files += 1

    def kill() -> None:
        killed = job.kill_driver_group()
        in_database.append(len(ledger(dsn)))
        job.wait_next_attempt(killed)

    # 1. Right after the first batch with rows is committed in PostgreSQL, likely before Spark
    # recorded it: the next attempt replays it, and the sink's marker or the ledger skips it.
    wait_db(dsn, "the first rows", lambda: bool(query(dsn, "SELECT 1 FROM page_views")), job)
    kill()

    # 2. At a random moment once the new attempt committed more.
    add_file()
    wait_db(dsn, "a batch of attempt 2", lambda: len(ledger(dsn)) > in_database[-1], job)
    time.sleep(rng.uniform(0.0, 2.0))  # mid-batch, mid-commit or between batches
    kill()

    # 3. Inside the commit's transaction: the test holds a lock that the COPY of the rows needs,
    # so the commit waits there with its batch id claimed but not committed, and the driver dies.
    with psycopg.connect(dsn) as blocker:
        blocker.execute("LOCK TABLE page_views IN EXCLUSIVE MODE")  # readers pass, COPY waits
        add_file()

        def blocked_copy() -> list[tuple[Any, ...]]:
            return query(
                dsn,
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND query LIKE 'COPY %%'",
            )

        wait_db(dsn, "a commit waiting to copy its rows", lambda: bool(blocked_copy()), job)
        (backend,) = blocked_copy()[0]
        blocked_batch = len(ledger(dsn))  # ids are contiguous: the next one is the blocked one
        killed = job.kill_driver_group()
        in_database.append(blocked_batch)
        blocker.rollback()  # release: the backend finds its client gone and rolls back
    wait_db(
        dsn,
        "the killed commit's backend to end",
        lambda: not query(dsn, "SELECT 1 FROM pg_stat_activity WHERE pid = %s", backend),
    )
    job.wait_next_attempt(killed)
    # The next attempt hands the blocked batch over again, and this time it is committed.
    wait_db(dsn, f"batch {blocked_batch}", lambda: len(ledger(dsn)) > blocked_batch, job)
    replays = replayed_batches(job)
    assert replays.get(killed + 1) == blocked_batch, replays

    # 4. After the database committed, before the driver heard of it: every commit waits for a
    # synchronous standby that does not exist (committed and durable, not yet acknowledged).
    with commits_wait_for_a_standby(dsn):
        add_file()
        waiting = "SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
        wait_db(
            dsn, "a commit waiting for its acknowledgement", lambda: bool(query(dsn, waiting)), job
        )
        (backend,) = query(dsn, waiting)[0]
        unacknowledged = len(ledger(dsn))
        killed = job.kill_driver_group()
        in_database.append(unacknowledged + 1)
        ((killed_at,),) = query(dsn, "SELECT clock_timestamp()")
    wait_db(
        dsn,
        "the acknowledged-to-nobody commit's backend to end",
        lambda: not query(dsn, "SELECT 1 FROM pg_stat_activity WHERE pid = %s", backend),
    )
    # Its rows and claim are in: the replay that comes must be skipped.
    ((claimed_at,),) = query(
        dsn,
        "SELECT committed_at FROM finishable_batches WHERE sink = %s AND batch_id = %s",
        SINK,
        unacknowledged,
    )
    assert claimed_at < killed_at
    job.wait_next_attempt(killed)
    add_file()
    wait_db(
        dsn, f"a batch after {unacknowledged}", lambda: len(ledger(dsn)) > unacknowledged + 1, job
    )
    assert replayed_batches(job).get(killed + 1) == unacknowledged

    # More input after the last kill, all of it read, then drained: every window fires.
    for _ in range(2):
        add_file()
    job.wait_read(files)
    drained = job.cli("stop", "--drain", "--timeout", "400")
    assert drained.returncode == 0, drained.stdout + drained.stderr + job.driver_logs()
    job.finish(timeout=600)
    status = job.status()
    assert status["phase"] == "Finished", status
    assert status["restarts"] == len(in_database) == 4

    truth = ground_truth(job.input)
    stored = table_counts(dsn)
    wrong = [
        (k, stored[k], truth[k]) for k in stored.keys() & truth.keys() if stored[k] != truth[k]
    ]
    assert stored == truth, (
        f"seed {seed}: lost {sorted(truth.keys() - stored.keys())[:5]}, wrong {wrong[:5]}, "
        f"extra {sorted(stored.keys() - truth.keys())[:5]}"
    )
    assert sum(stored.values()) == files * 300
    batches = assert_ledger_matches_table(dsn)
    replays = replayed_batches(job)
    for number, committed in enumerate(in_database, start=1):
        replay = replays.get(number + 1)
        log.info(
            "kill %d: PostgreSQL had batches 0-%d; attempt %d replayed %s%s",
            number,
            committed - 1,
            number + 1,
            "no batch" if replay is None else f"batch {replay}",
            " (already committed: skipped)" if replay is not None and replay < committed else "",
        )
    log.info(
        "%d files, %d rows, %d batches, %d windows", files, files * 300, len(batches), len(stored)
    )
