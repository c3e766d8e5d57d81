"""Split enumerators run as operator coordinators in the driver (FLIP-27, OperatorCoordinator).

Modules: ``contract`` (the OperatorCoordinator contract, ``NO_CHECKPOINT``), ``events`` and
``splits`` (wire types), ``host`` (one thread per coordinator, call-order checks, idempotent
replies), ``enumerator`` (the shared split ledger and snapshot format), ``ranges`` and ``files``
(enumerators), ``endpoint`` (authenticated HTTP server, needs aiohttp) and ``client`` (stdlib-only
client for Spark workers). The enumerators and the endpoint are imported from their modules, so
that importing the client in an executor does not pull in pyarrow or aiohttp.
"""

from finishable.coordinator.client import (
    CoordinatorClient,
    CoordinatorRequestError,
    CoordinatorUnavailable,
)
from finishable.coordinator.contract import (
    NO_CHECKPOINT,
    AttemptGoneError,
    CoordinatorContext,
    CoordinatorProgress,
    CoordinatorProvider,
    OperatorCoordinator,
    ReportsProgress,
    SubtaskGateway,
)
from finishable.coordinator.errors import (
    CoordinatorClosedError,
    CoordinatorError,
    CoordinatorFailedError,
    CoordinatorOrderViolation,
    CoordinatorRejection,
    EnumeratorStateError,
    EventDecodeError,
    OrderRule,
    RequestIdConflict,
)
from finishable.coordinator.events import (
    AddSplits,
    NoMoreSplits,
    OperatorEvent,
    RequestSplit,
    SplitFinished,
    SplitSkipped,
    event_from_json,
    event_to_json,
    register_event,
)
from finishable.coordinator.host import CoordinatorHost, RemoteAttemptFailure
from finishable.coordinator.splits import (
    FileSplit,
    KafkaSplit,
    RangeSplit,
    SentinelSplit,
    Split,
    register_split,
    split_from_json,
)

__all__ = [
    "NO_CHECKPOINT",
    "AddSplits",
    "AttemptGoneError",
    "CoordinatorClient",
    "CoordinatorClosedError",
    "CoordinatorContext",
    "CoordinatorError",
    "CoordinatorFailedError",
    "CoordinatorHost",
    "CoordinatorOrderViolation",
    "CoordinatorProgress",
    "CoordinatorProvider",
    "CoordinatorRejection",
    "CoordinatorRequestError",
    "CoordinatorUnavailable",
    "EnumeratorStateError",
    "EventDecodeError",
    "FileSplit",
    "KafkaSplit",
    "NoMoreSplits",
    "OperatorCoordinator",
    "OperatorEvent",
    "OrderRule",
    "RangeSplit",
    "RemoteAttemptFailure",
    "ReportsProgress",
    "RequestIdConflict",
    "RequestSplit",
    "SentinelSplit",
    "Split",
    "SplitFinished",
    "SplitSkipped",
    "SubtaskGateway",
    "event_from_json",
    "event_to_json",
    "register_event",
    "register_split",
    "split_from_json",
]
