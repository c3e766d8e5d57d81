"""Finishable Spark Operator: PySpark jobs with Flink-style lifecycle guarantees on Kubernetes.

A program imports what it needs from here::

    from finishable import FinishableJob, sources, sinks

They load lazily, so the operator and the CLI never import PySpark.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from finishable.connectors import sinks, sources
    from finishable.driver.job import FinishableJob
    from finishable.driver.outcome import JobFailed

__all__ = ["FinishableJob", "JobFailed", "__version__", "sinks", "sources"]

_LAZY = {
    "FinishableJob": ("finishable.driver.job", "FinishableJob"),
    "JobFailed": ("finishable.driver.outcome", "JobFailed"),
    "sinks": ("finishable.connectors.sinks", None),
    "sources": ("finishable.connectors.sources", None),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'finishable' has no attribute {name!r}")
    module_name, attribute = _LAZY[name]
    module = importlib.import_module(module_name)
    return module if attribute is None else getattr(module, attribute)
