"""The local cluster's object store: an S3 endpoint (moto's server) that pods and tests share.

A cluster that keeps datasets beyond a job has a bucket somewhere (S3, GCS, MinIO); here it is
moto's ``ThreadedMotoServer`` on every address of this machine, so pods reach it at the node's
address and the tests at loopback. The credentials are moto's fake ones, carried in the URL
(``pyarrow.fs`` reads ``s3://KEY:SECRET@bucket/...``), so no pod needs a Secret for them.
"""

from __future__ import annotations

import logging
from typing import Self

from testcluster.network import free_port

BUCKET = "finishable"
CREDENTIALS = "testing:testing"


class ObjectStore:
    """One S3 bucket on a free port; ``url`` addresses a prefix as a given host sees it."""

    def __init__(self) -> None:
        self.port = free_port()
        self._server: object | None = None

    def start(self) -> Self:
        from moto.server import ThreadedMotoServer  # noqa: PLC0415 - only clusters need it

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        server = ThreadedMotoServer(ip_address="0.0.0.0", port=self.port, verbose=False)
        server.start()
        self._server = server
        import pyarrow.fs as pafs  # noqa: PLC0415

        filesystem, _ = pafs.FileSystem.from_uri(self.url("", "127.0.0.1"))
        filesystem.create_dir(BUCKET)
        return self

    def url(self, prefix: str, host: str) -> str:
        """``s3://`` URL of ``prefix`` in the bucket, reached at ``host``."""
        path = f"{BUCKET}/{prefix}".rstrip("/")
        query = f"endpoint_override={host}:{self.port}&scheme=http&region=us-east-1"
        return f"s3://{CREDENTIALS}@{path}?{query}&allow_bucket_creation=true"

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()  # type: ignore[attr-defined]
            self._server = None
