"""A real local Spark for driver and connector tests: one session per test module (5-17 s)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest


def start_session(warehouse: Path, conf: Mapping[str, str] | None = None) -> Any:
    """``local[2]`` SparkSession; Python workers run this interpreter so they import finishable."""
    if shutil.which("java") is None and "JAVA_HOME" not in os.environ:
        pytest.fail("PySpark needs Java 17: install a JDK (openjdk-17-jre-headless)")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("finishable-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.driver.memory", "1g")
        .config("spark.sql.streaming.stopTimeout", "60s")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The module's Spark session, stopped after its last test."""
    session = start_session(tmp_path_factory.mktemp("warehouse"))
    try:
        yield session
    finally:
        session.stop()
