"""One dispatch of the phase machine's actions, for the operator and `finishable run`.

Each caller supplies its :class:`Effects` (the operator on the cluster, the local runner on this
machine) and calls :func:`dispatch`; the ``match`` over :class:`ActionKind` ends in
``assert_never``, so ``mypy --strict`` refuses a new kind until both callers have an effect for
it. ``R`` is what an effect gives back: nothing for the runner, a coroutine for the operator.
"""

from __future__ import annotations

from typing import Protocol, TypeVar, assert_never

from finishable.api.status import ControlRequest
from finishable.lifecycle.decisions import Action, ActionKind

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


class Effects(Protocol[R_co]):
    """What a caller does for each kind of action (lifecycle/decisions.py says what each means)."""

    def start_driver(self, action: Action) -> R_co: ...

    def take_over(self, action: Action) -> R_co: ...

    def start_standby(self, action: Action) -> R_co: ...

    def delete_standby(self, action: Action) -> R_co: ...

    def send_request(self, request: ControlRequest) -> R_co: ...

    def cancel_request(self, request: ControlRequest) -> R_co: ...

    def delete_driver(self, action: Action) -> R_co: ...

    def delete_shuffle(self, action: Action) -> R_co: ...

    def delete_executors(self, action: Action) -> R_co: ...

    def start_upgrade_check(self, action: Action) -> R_co: ...

    def delete_upgrade_check(self, action: Action) -> R_co: ...

    def requeue(self, action: Action) -> R_co: ...


class ActionError(ValueError):
    """An action the phase machine built without what its kind needs (a bug of the machine)."""


def dispatch(action: Action, effects: Effects[R]) -> R:
    """The effect of ``action``, by its kind; every kind has one."""
    kind = action.kind
    match kind:
        case ActionKind.START_DRIVER:
            return effects.start_driver(action)
        case ActionKind.TAKE_OVER:
            return effects.take_over(action)
        case ActionKind.START_STANDBY:
            return effects.start_standby(action)
        case ActionKind.DELETE_STANDBY:
            return effects.delete_standby(action)
        case ActionKind.SEND_REQUEST:
            return effects.send_request(_request_of(action))
        case ActionKind.CANCEL_REQUEST:
            return effects.cancel_request(_request_of(action))
        case ActionKind.DELETE_DRIVER:
            return effects.delete_driver(action)
        case ActionKind.DELETE_SHUFFLE:
            return effects.delete_shuffle(action)
        case ActionKind.DELETE_EXECUTORS:
            return effects.delete_executors(action)
        case ActionKind.START_UPGRADE_CHECK:
            return effects.start_upgrade_check(action)
        case ActionKind.DELETE_UPGRADE_CHECK:
            return effects.delete_upgrade_check(action)
        case ActionKind.REQUEUE:
            return effects.requeue(action)
        case _:
            assert_never(kind)


def _request_of(action: Action) -> ControlRequest:
    if action.request is None:
        raise ActionError(f"{action.kind.value} without a request: {action}")
    return action.request
