"""A savepoint's files by its location, and ``finishable dispose-savepoint`` against a real
directory and S3 (moto)."""

from __future__ import annotations

from pathlib import Path

import pytest

from finishable.cli import main
from finishable.state.backends import open_backend
from finishable.state.checkpointstore import CheckpointStore, savepoint_meta_of
from finishable.state.configmap import configmap_name
from finishable.state.errors import StateError
from finishable.state.savepointfiles import (
    SavepointFiles,
    configmap_files,
    dispose_savepoint,
    object_storage_files,
)
from tests.state.conftest import S3Server

pytestmark = pytest.mark.quick

BLOB = "snapshots/sp-000000000007.blob"


def test_the_meta_is_beside_the_blob_and_only_savepoint_blobs_are_accepted() -> None:
    assert savepoint_meta_of(BLOB) == "snapshots/sp-000000000007.meta"
    assert savepoint_meta_of("sp-1.blob") == "sp-1.meta"
    for name in ("snapshots/chk-000000000007.blob", "sp-7.meta", "sp-x.blob", "data.parquet"):
        with pytest.raises(ValueError, match="not a savepoint blob"):
            savepoint_meta_of(name)


def test_object_storage_files_split_the_location() -> None:
    files = object_storage_files("s3://bucket/jobs/a/snapshots/sp-000000000007.blob")
    assert files == SavepointFiles(
        root="s3://bucket/jobs/a/snapshots",
        meta="sp-000000000007.meta",
        blob="sp-000000000007.blob",
    )
    with pytest.raises(ValueError, match="not a savepoint blob"):
        object_storage_files("s3://bucket/jobs/a/snapshots/chk-000000000007.blob")
    with pytest.raises(ValueError, match="ConfigMaps"):
        object_storage_files("configmap://jobs/a-snapshots.sp-000000000007.blob")
    with pytest.raises(ValueError, match="directory"):
        object_storage_files("sp-000000000007.blob")


def test_configmap_files_are_the_objects_of_the_job_backend() -> None:
    location = f"configmap://jobs/{configmap_name('clicks', BLOB)}"
    assert location == "configmap://jobs/clicks-snapshots.sp-000000000007.blob"
    files = configmap_files(location, "clicks")
    assert files == SavepointFiles(root="jobs", meta="snapshots/sp-000000000007.meta", blob=BLOB)
    assert configmap_files("configmap://jobs/clicks-sp-000000000002.blob", "clicks").blob == (
        "sp-000000000002.blob"
    )
    for wrong in (
        "configmap://jobs/other-snapshots.sp-000000000007.blob",  # another job's
        "configmap://jobs/clicks-snapshots.chk-000000000007.blob",  # a checkpoint
        "configmap:clicks/savepoints/1",
        "s3://b/clicks-snapshots.sp-000000000007.blob",
    ):
        with pytest.raises(ValueError):
            configmap_files(wrong, "clicks")


def _savepoint(url: str) -> str:
    with open_backend(url) as backend:
        store = CheckpointStore(backend)
        store.put_checkpoint(3, b"checkpoint")
        return store.put_savepoint(7, b"state").location


def _names(url: str) -> list[str]:
    with open_backend(url) as backend:
        return backend.list()


def test_dispose_deletes_meta_and_blob_of_a_directory_savepoint_and_nothing_else(
    tmp_path: Path,
) -> None:
    url = (tmp_path / "state").as_uri()
    location = _savepoint(url)
    assert location.endswith("/snapshots/sp-000000000007.blob")
    dispose_savepoint(location)
    assert _names(url) == ["snapshots/chk-000000000003.blob", "snapshots/chk-000000000003.meta"]
    dispose_savepoint(location)  # already gone: success


def test_dispose_leaves_the_blob_when_the_meta_cannot_go(tmp_path: Path) -> None:
    """Meta first: a failure before the blob leaves a whole savepoint or none at all visible."""
    url = (tmp_path / "state").as_uri()
    location = _savepoint(url)
    meta = tmp_path / "state" / "snapshots" / "sp-000000000007.meta"
    meta.unlink()
    meta.mkdir()  # a directory where the meta is: deleting it fails
    (meta / "x").write_text("x")
    with pytest.raises(StateError, match=r"sp-000000000007\.meta"):
        dispose_savepoint(location)
    assert (tmp_path / "state" / "snapshots" / "sp-000000000007.blob").exists()


def test_dispose_deletes_an_s3_savepoint(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = s3_server.url("dispose")
    location = _savepoint(url)
    assert location == "s3://finishable-state/dispose/snapshots/sp-000000000007.blob"
    # the disposal pod gets the endpoint and keys from the storage's secretRef, as environment
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://{s3_server.endpoint}")
    assert main(["dispose-savepoint", location]) == 0
    assert _names(url) == ["snapshots/chk-000000000003.blob", "snapshots/chk-000000000003.meta"]


def test_dispose_reaches_the_storage_as_the_jobs_url_does(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = s3_server.url("reached")  # its endpoint and keys in the URL, as a job's spec has them
    location = _savepoint(url)
    assert "?" not in location and "@" not in location, "a status shows no connection details"
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("FINISHABLE_STATE_URL", url)  # as the disposal pod gets it
    assert main(["dispose-savepoint", location]) == 0
    assert _names(url) == ["snapshots/chk-000000000003.blob", "snapshots/chk-000000000003.meta"]


def test_the_command_refuses_what_is_not_a_savepoint_blob(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = (tmp_path / "state").as_uri()
    _savepoint(url)
    checkpoint = f"{url}/snapshots/chk-000000000003.blob"
    assert main(["dispose-savepoint", checkpoint]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "not a savepoint blob" in error
    assert "snapshots/chk-000000000003.blob" in _names(url)


def test_the_command_disposes_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = (tmp_path / "state").as_uri()
    location = _savepoint(url)
    assert main(["dispose-savepoint", location]) == 0
    assert f"disposed of the savepoint at {location}" in capsys.readouterr().out
    assert main(["dispose-savepoint", location]) == 0  # nothing left: still success


def test_the_command_fails_with_one_line_when_the_storage_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = (tmp_path / "state").as_uri()
    location = _savepoint(url)
    meta = tmp_path / "state" / "snapshots" / "sp-000000000007.meta"
    meta.unlink()
    meta.mkdir()
    (meta / "x").write_text("x")
    assert main(["dispose-savepoint", location]) == 1
    error = capsys.readouterr().err
    assert error.startswith(f"cannot dispose of the savepoint at {location}: ")
    assert error.count("\n") == 1
