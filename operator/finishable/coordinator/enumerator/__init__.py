"""The split bookkeeping every enumerator shares: lazy assignment, failover, snapshot and restore.

``SplitEnumerator`` (``base``), the base of the file and range enumerators, is built in layers:
the ledger of which split is where and its lazy assignment (``ledger``), the snapshot format that
stores and restores that ledger (``snapshot``), and on top the coordinator contract with its
failover and the lifecycle controls a runtime steers a source by (``base``).
"""

from finishable.coordinator.enumerator.base import AdoptResult, SourceControlState, SplitEnumerator
from finishable.coordinator.enumerator.ledger import AssignmentView
from finishable.coordinator.enumerator.state import (
    ENUMERATOR_STATE_FORMAT,
    ENUMERATOR_STATE_VERSION,
)

__all__ = [
    "ENUMERATOR_STATE_FORMAT",
    "ENUMERATOR_STATE_VERSION",
    "AdoptResult",
    "AssignmentView",
    "SourceControlState",
    "SplitEnumerator",
]
