"""Every action the phase machine decides reaches the effect of its kind, on both callers."""

from __future__ import annotations

import inspect
from datetime import UTC, datetime

import pytest

from finishable.api.models import RequestAction
from finishable.api.status import ControlRequest
from finishable.controller.job.reconcile import ClusterEffects
from finishable.lifecycle.decisions import Action, ActionKind
from finishable.lifecycle.dispatch import ActionError, Effects, dispatch
from finishable.local.runner import LocalEffects

pytestmark = pytest.mark.quick

REQUEST = ControlRequest(
    id="r1", action=RequestAction.STOP, requested_at=datetime(2026, 1, 1, tzinfo=UTC)
)
EFFECTS = sorted(
    name for name, _ in inspect.getmembers(Effects, inspect.isfunction) if not name.startswith("_")
)


class Recorded:
    """Effects that say which of them ran, and with what."""

    def __getattr__(self, name: str) -> object:
        if name not in EFFECTS:
            raise AttributeError(name)
        return lambda argument: (name, argument)


@pytest.mark.parametrize("kind", list(ActionKind))
def test_each_kind_reaches_the_effect_of_its_name(kind: ActionKind) -> None:
    action = Action(kind, attempt=3, request=REQUEST)
    effect, argument = dispatch(action, Recorded())  # type: ignore[arg-type]
    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in kind.value).lstrip("_")
    assert effect == snake
    assert argument == (
        REQUEST if kind in (ActionKind.SEND_REQUEST, ActionKind.CANCEL_REQUEST) else action
    )


@pytest.mark.parametrize("kind", [ActionKind.SEND_REQUEST, ActionKind.CANCEL_REQUEST])
def test_a_request_action_without_its_request_is_refused_by_name(kind: ActionKind) -> None:
    with pytest.raises(ActionError, match=f"{kind.value} without a request"):
        dispatch(Action(kind), Recorded())  # type: ignore[arg-type]


@pytest.mark.parametrize("caller", [ClusterEffects, LocalEffects])
def test_the_operator_and_the_runner_each_have_every_effect(caller: type) -> None:
    assert len(EFFECTS) == len(ActionKind)
    missing = [name for name in EFFECTS if not callable(getattr(caller, name, None))]
    assert not missing, f"{caller.__name__} has no {missing}"
