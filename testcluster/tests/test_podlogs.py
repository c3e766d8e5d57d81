"""A real kubelet's pod logs kept in the local cluster's layout (``podlogs.py``): CRI lines
decoded, restarts appended, and a file the kubelet deleted read to its end."""

from __future__ import annotations

from pathlib import Path

import pytest

from testcluster.controlplane.podlogs import PodLogKeeper, cri_text, kept_path

pytestmark = pytest.mark.quick

UID = "2ff219d9-1c6f-4a43-9a2e-5b1f0e0c1a77"


@pytest.mark.parametrize(
    ("line", "text"),
    [
        (b"2026-11-29T10:00:00.1Z stdout F hello world", b"hello world\n"),
        (b"2026-11-29T10:00:00.1Z stderr P part of ", b"part of "),
        (b"2026-11-29T10:00:00.1Z stdout F ", b"\n"),
        (b"2026-11-29T10:00:00.1Z stdout F", b"\n"),
        (b"not a CRI line", b"not a CRI line\n"),
    ],
)
def test_a_cri_line_gives_the_containers_own_text(line: bytes, text: bytes) -> None:
    assert cri_text(line) == text


def test_a_log_is_kept_under_its_pods_name_and_uid(tmp_path: Path) -> None:
    source = tmp_path / "logs" / f"jobs_clicks-driver-1_{UID}" / "driver" / "0.log"
    assert kept_path(source, tmp_path / "pods") == (
        tmp_path / "pods" / "jobs" / "clicks-driver-1-2ff219d9" / "driver.log"
    )
    assert kept_path(tmp_path / "logs" / "stray" / "x" / "0.log", tmp_path) is None


def test_what_a_deleted_pod_wrote_is_kept_to_the_end_with_its_restarts(tmp_path: Path) -> None:
    logs, pods = tmp_path / "logs", tmp_path / "pods"
    container = logs / f"jobs_clicks-driver-1_{UID}" / "driver"
    container.mkdir(parents=True)
    first = container / "0.log"
    first.write_bytes(b"t stdout F started\nt stderr P half a ")
    keeper = PodLogKeeper([logs], pods)
    keeper.sync()
    kept = pods / "jobs" / "clicks-driver-1-2ff219d9" / "driver.log"
    assert kept.read_bytes() == b"started\n"  # the half line waits for its end
    with first.open("ab") as writing:
        first.unlink()  # the kubelet deletes the pod's logs; the container writes on
        writing.write(b"\nt stderr F line\nt stdout F crashed\n")
    (container / "1.log").write_bytes(b"t stdout F restarted\n")
    keeper.sync()
    keeper.stop()
    assert kept.read_bytes() == b"started\nhalf a line\ncrashed\nrestarted\n"
    assert not keeper._followed, "a deleted file is let go once read"
