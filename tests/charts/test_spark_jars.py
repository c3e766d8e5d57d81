"""docker/spark-jars.sh: Spark's S3 connector from a Maven repository, each jar checked against
the sha256 docker/spark-jars.txt pins, cached once, and copied where Spark loads jars from."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.quick

ROOT = Path(__file__).resolve().parents[2]


def checkout(
    tmp_path: Path, listed: dict[str, bytes], *, pinned: dict[str, bytes] | None = None
) -> Path:
    """A copy of the script beside a list of ``listed`` jars (group ``org.example``) in a Maven
    repository layout under ``tmp_path/repository``; the list pins ``pinned`` (default: the
    jars' own bytes)."""
    root = tmp_path / "checkout"
    (root / "docker").mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "docker" / "spark-jars.sh", root / "docker" / "spark-jars.sh")
    lines = ["# group:artifact:version sha256"]
    for name, data in listed.items():
        artifact, version = name.rsplit("-", 1)
        folder = tmp_path / "repository" / "org" / "example" / artifact / version
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.jar").write_bytes(data)
        digest = hashlib.sha256((pinned or listed)[name]).hexdigest()
        lines.append(f"org.example:{artifact}:{version} {digest}")
    (root / "docker" / "spark-jars.txt").write_text("\n".join(lines) + "\n")
    return root


def install(root: Path, tmp_path: Path, dest: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(root / "docker" / "spark-jars.sh"), str(dest)],
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
            "XDG_CACHE_HOME": str(tmp_path / "cache"),
            "MAVEN_REPOSITORY": (tmp_path / "repository").as_uri(),
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_jars_are_fetched_once_checked_copied_and_replaced_when_the_list_moves_on(
    tmp_path: Path,
) -> None:
    dest = tmp_path / "pyspark-jars"
    root = checkout(tmp_path, {"s3a-1.0": b"one", "sdk-2.0": b"two"})
    first = install(root, tmp_path, dest)
    assert first.returncode == 0, first.stderr
    assert "fetched 2 jar(s)" in first.stderr
    assert (dest / "s3a-1.0.jar").read_bytes() == b"one"
    # readable by everyone: the image runs Spark as uid 1000, the jars are copied in as root
    assert all(p.stat().st_mode & 0o777 == 0o644 for p in dest.glob("*.jar"))
    assert (dest / "sdk-2.0.jar").read_bytes() == b"two"

    shutil.rmtree(tmp_path / "repository")  # cached: nothing is fetched again
    (dest / "sdk-2.0.jar").unlink()
    again = install(root, tmp_path, dest)
    assert again.returncode == 0 and "fetched" not in again.stderr, again.stderr
    assert (dest / "sdk-2.0.jar").read_bytes() == b"two"

    moved_on = checkout(tmp_path, {"s3a-1.1": b"one, newer", "sdk-2.0": b"two"})
    (dest / "spark-core.jar").write_bytes(b"pyspark's own")
    upgraded = install(moved_on, tmp_path, dest)
    assert upgraded.returncode == 0, upgraded.stderr
    assert sorted(p.name for p in dest.glob("*.jar")) == [
        "s3a-1.1.jar",
        "sdk-2.0.jar",
        "spark-core.jar",
    ]


def test_a_jar_whose_sha256_is_not_the_pinned_one_is_refused_and_kept_nowhere(
    tmp_path: Path,
) -> None:
    dest = tmp_path / "pyspark-jars"
    root = checkout(tmp_path, {"s3a-1.0": b"tampered"}, pinned={"s3a-1.0": b"genuine"})
    done = install(root, tmp_path, dest)
    assert done.returncode == 1
    digest = hashlib.sha256(b"genuine").hexdigest()
    assert (
        f"s3a-1.0.jar has sha256 {hashlib.sha256(b'tampered').hexdigest()}, not the {digest}"
        in done.stderr
    )
    assert not list(dest.glob("*.jar"))
    assert not [
        p
        for p in (tmp_path / "cache" / "finishable" / "spark-jars").iterdir()
        if p.suffix == ".jar" or p.name.startswith(".s3a")
    ]


def test_an_unreachable_repository_is_said_with_the_url(tmp_path: Path) -> None:
    root = checkout(tmp_path, {"s3a-1.0": b"one"})
    shutil.rmtree(tmp_path / "repository")
    done = install(root, tmp_path, tmp_path / "dest")
    assert done.returncode == 1
    assert "cannot fetch file://" in done.stderr and "s3a-1.0.jar" in done.stderr
    assert "Maven Central must be reachable" in done.stderr
