"""One real local Spark session per test module (``tests.support.spark``)."""

from tests.support.spark import spark

__all__ = ["spark"]
