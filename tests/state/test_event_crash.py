"""A real process appending job events is SIGKILLed mid-stream; nothing acknowledged is lost."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from finishable.state import JobEventStore, read_events

from .conftest import BackendCase

pytestmark = pytest.mark.quick

ROOT = Path(__file__).resolve().parents[2]


def flushed_up_to(side_file: Path) -> int:
    if not side_file.exists():
        return 0
    lines = side_file.read_text().splitlines()
    complete = [line for line in lines if len(line.split()) == 2]
    return max((int(line.split()[1]) for line in complete), default=0)


def test_sigkill_mid_stream_loses_nothing_acknowledged(case: BackendCase, tmp_path: Path) -> None:
    side_file = tmp_path / "flushed.txt"
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.state.event_writer",
            json.dumps(case.spec),
            str(side_file),
            "8192",
        ],
        cwd=ROOT,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while flushed_up_to(side_file) < 2000:
            if child.poll() is not None:
                stderr = child.stderr.read().decode() if child.stderr else ""
                pytest.fail(f"the writer exited early ({child.returncode}): {stderr}")
            if time.monotonic() > deadline:
                pytest.fail("the writer did not flush 2000 events within 120 s")
            time.sleep(0.02)
        child.send_signal(signal.SIGKILL)  # mid-stream: appends and flushes are in progress
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL
    acknowledged = flushed_up_to(side_file)

    events = list(read_events(case.backend))  # raises on anything corrupt before the tail
    seqs = [event.seq for event in events]
    assert seqs == list(range(1, len(events) + 1)), "in order, without gaps or duplicates"
    assert len(events) >= acknowledged, "every acknowledged event was replayed"
    for event in events:  # and each is the event that was appended under that number
        assert event.type == "Tick"
        assert event.data == {"n": event.seq, "pad": "x" * (event.seq % 64)}

    # The next driver attempt recovers the log and continues it.
    with JobEventStore(case.reopen()) as store:
        assert store.last_seq == len(events)
        store.append({"type": "Recovered"})
    replayed = list(read_events(case.backend))
    assert [e.seq for e in replayed] == list(range(1, len(events) + 2))
    assert replayed[-1].type == "Recovered"
