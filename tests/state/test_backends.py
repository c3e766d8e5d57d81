"""The byte-object contract, identical on the local directory, S3 (moto) and ConfigMaps."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from finishable.state import (
    BackendError,
    LocalDirBackend,
    ObjectNotFound,
    open_backend,
    validate_name,
)
from finishable.state.backends import ReadOnlyBackend, reached_like
from finishable.state.objectstore import ObjectStoreBackend

from .conftest import BackendCase, S3Server

pytestmark = pytest.mark.quick


def test_put_get_overwrite_delete(case: BackendCase) -> None:
    backend = case.backend
    backend.put("a/one", b"first")
    assert backend.get("a/one") == b"first"
    backend.put("a/one", b"second, longer")
    assert backend.get("a/one") == b"second, longer"
    backend.delete("a/one")
    with pytest.raises(ObjectNotFound, match="a/one"):
        backend.get("a/one")
    backend.delete("a/one")  # idempotent


def test_list_by_prefix_sorted(case: BackendCase) -> None:
    backend = case.backend
    for name in ("x/b", "x/a", "x/c.meta", "y/a", "xa"):
        backend.put(name, name.encode())
    assert backend.list("x/") == ["x/a", "x/b", "x/c.meta"]
    assert backend.list("x/c") == ["x/c.meta"]
    assert backend.list("nothing/") == []
    assert set(backend.list()) >= {"x/a", "x/b", "x/c.meta", "y/a", "xa"}


def test_empty_and_binary_payloads(case: BackendCase) -> None:
    payload = bytes(range(256)) * 3
    case.backend.put("bin", payload)
    case.backend.put("empty", b"")
    assert case.backend.get("bin") == payload
    assert case.backend.get("empty") == b""


def test_large_object_round_trip(case: BackendCase) -> None:
    """2.5 MB: one file or S3 object; on ConfigMaps a head plus three parts."""
    payload = os.urandom(2_500_000)
    case.backend.put("big/blob", payload)
    assert case.backend.get("big/blob") == payload
    case.backend.put("big/blob", b"now small")  # shrinking drops the old parts
    assert case.backend.get("big/blob") == b"now small"
    case.backend.delete("big/blob")
    assert case.backend.list("big/") == []


def test_concurrent_writers(case: BackendCase) -> None:
    errors: list[BaseException] = []

    def write(index: int) -> None:
        try:
            for round_ in range(3):
                case.backend.put(f"c/{index}", f"{index}-{round_}".encode())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert [case.backend.get(f"c/{i}") for i in range(6)] == [f"{i}-2".encode() for i in range(6)]


def test_reopened_backend_sees_the_same_objects(case: BackendCase) -> None:
    case.backend.put("p/q", b"persisted")
    other = case.reopen()
    try:
        assert other.get("p/q") == b"persisted"
        assert other.list("p/") == ["p/q"]
    finally:
        other.close()


def test_location_names_the_object(case: BackendCase) -> None:
    location = case.backend.location("s/chk-1.blob")
    scheme = {"local": "file://", "s3": "s3://", "configmap": "configmap://"}[case.kind]
    assert location.startswith(scheme)
    assert "chk-1.blob" in location


@pytest.mark.parametrize("name", ["", "/abs", "a//b", "UP", "a/../b", "-x", "x-", "a b", "a_b"])
def test_invalid_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="invalid object name"):
        validate_name(name)


def test_open_backend_from_urls(tmp_path: Path, s3_server: S3Server) -> None:
    local = open_backend(str(tmp_path / "plain"))
    assert isinstance(local, LocalDirBackend)
    assert isinstance(open_backend(f"local://{tmp_path}/l"), LocalDirBackend)
    file_backend = open_backend(f"file://{tmp_path}/via-arrow")
    assert isinstance(file_backend, ObjectStoreBackend)
    file_backend.put("d/x", b"file")
    assert file_backend.get("d/x") == b"file"
    assert (tmp_path / "via-arrow" / "d" / "x").read_bytes() == b"file"
    assert file_backend.list() == ["d/x"]  # no temporary files left behind
    s3 = open_backend(s3_server.url("opened"))
    assert isinstance(s3, ObjectStoreBackend)
    s3.put("y", b"s3")
    assert s3.get("y") == b"s3"
    assert s3.location("y") == "s3://finishable-state/opened/y"


def test_object_store_credentials_from_the_url(s3_server: S3Server) -> None:
    """A secretRef may also arrive inline; the URL's credentials never reach messages."""
    host = s3_server.endpoint
    backend = ObjectStoreBackend(
        f"s3://AKIDEXAMPLE:s3cr3t@finishable-state/inline?endpoint_override={host}&scheme=http"
        "&region=us-east-1"
    )
    backend.put("z", b"with inline credentials")
    assert backend.get("z") == b"with inline credentials"
    assert "s3cr3t" not in backend.location("z")
    with pytest.raises(BackendError) as raised:
        ObjectStoreBackend("s3://KEY:s3cr3t@bucket/x?unknown_option=1")
    assert "s3cr3t" not in str(raised.value)


class _OverwrittenWhileOpened:
    """S3 as pyarrow speaks it, with an overwrite landing between its HEAD and its GET: the
    moment an object that another process rewrites (a lease, a request's status) is read."""

    def __init__(self, backend: ObjectStoreBackend, replacement: bytes) -> None:
        self.fs = backend.fs
        self.backend = backend
        self.replacement: bytes | None = replacement

    def open_input_stream(self, path: str) -> object:
        stream = self.fs.open_input_stream(path)
        if self.replacement is not None:
            with self.fs.open_output_stream(path) as out:
                out.write(self.replacement)
            self.replacement = None
        return stream

    def __getattr__(self, name: str) -> object:
        return getattr(self.fs, name)


def test_an_object_overwritten_while_read_on_s3_is_read_whole(s3_server: S3Server) -> None:
    backend = ObjectStoreBackend(s3_server.url("torn"))
    started = b'{"status": "IN_PROGRESS"}'
    completed = b'{"status": "COMPLETED", "completedAt": "2026-11-26T21:00:00+00:00"}'
    backend.put("request", started)
    racing = _OverwrittenWhileOpened(backend, completed)
    with racing.open_input_stream(backend._path("request")) as stream:  # type: ignore[attr-defined]
        assert stream.read() == completed[: len(started)]  # pyarrow alone tears the read
    backend.put("request", started)
    racing.replacement = completed
    backend.fs = racing  # type: ignore[assignment]
    assert backend.get("request") == completed


def test_a_read_only_backend_reads_and_refuses_every_write(tmp_path: Path) -> None:
    inner = LocalDirBackend(tmp_path)
    inner.put("snapshots/chk-1.blob", b"state")
    reader = ReadOnlyBackend(inner)
    assert reader.get("snapshots/chk-1.blob") == b"state"
    assert reader.list("snapshots/") == ["snapshots/chk-1.blob"]
    assert reader.location("x") == inner.location("x")
    with pytest.raises(PermissionError, match="read-only"):
        reader.put("snapshots/chk-2.blob", b"new")
    with pytest.raises(PermissionError, match="read-only"):
        reader.delete("snapshots/chk-1.blob")
    assert inner.list("") == ["snapshots/chk-1.blob"] and inner.get("snapshots/chk-1.blob")


def test_a_location_from_a_status_is_reached_like_the_readers_own_storage() -> None:
    own = "s3://key:secret@bucket/state/job-b?endpoint_override=minio:9000&scheme=http"
    shown = "s3://bucket/state/job-a/snapshots/sp-000000000004.blob"
    assert reached_like(shown, own) == (
        "s3://key:secret@bucket/state/job-a/snapshots/sp-000000000004.blob"
        "?endpoint_override=minio:9000&scheme=http"
    )
    assert reached_like(shown, "s3://bucket/state/b") == shown, "nothing to borrow"
    explicit = "s3://bucket/a/sp-1.blob?endpoint_override=other:9000"
    assert reached_like(explicit, own) == explicit, "its own options win"
    assert reached_like("gs://bucket/a/sp-1.blob", own) == "gs://bucket/a/sp-1.blob"
    assert reached_like("/mnt/sp-1.blob", own) == "/mnt/sp-1.blob"
    assert reached_like(shown, "configmap:") == shown
