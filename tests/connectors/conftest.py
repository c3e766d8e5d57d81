"""One real local Spark session per test module (``tests.support.spark``), and moto's S3 server
on loopback (an Iceberg warehouse in object storage)."""

from tests.state.conftest import s3_server
from tests.support.spark import spark

__all__ = ["s3_server", "spark"]
