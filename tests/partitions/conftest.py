"""The partition catalog runs on a local directory and on S3 (moto on loopback)."""

from tests.state.conftest import s3_server

__all__ = ["s3_server"]
