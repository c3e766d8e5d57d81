"""Finishable Spark Operator: PySpark jobs with Flink-style lifecycle guarantees on Kubernetes."""

__version__ = "0.1.0"
