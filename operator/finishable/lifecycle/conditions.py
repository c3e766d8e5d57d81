"""The conditions of a job's status (Ready, Progressing, Degraded), derived from its phase.

Every step of the phase machine ends by recomputing them: Ready and Progressing follow the phase,
Degraded says why a wish was not honoured (set by the step, or ``AsExpected``). A condition keeps
its ``lastTransitionTime`` while its status is unchanged, and a newly Degraded condition (or a
new reason for it) is posted as a Warning event.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from finishable.api.models import ConditionStatus, ConditionType, Phase, Transition
from finishable.api.status import Condition, FinishableSparkJobStatus
from finishable.lifecycle.decisions import Event, Observation

P = Phase

_READY_PHASES = frozenset({P.RUNNING, P.SAVEPOINTING, P.DRAINING, P.FINISHING})
_PROGRESSING_PHASES = frozenset(
    {P.PENDING, P.SUBMITTED, P.SAVEPOINTING, P.DRAINING, P.FINISHING, P.RECOVERING}
)


@dataclass
class _ConditionSpec:
    type: ConditionType
    status: ConditionStatus
    reason: str
    message: str
    generation: int | None = field(default=None)


def conditions_for(
    before: FinishableSparkJobStatus,
    status: FinishableSparkJobStatus,
    observation: Observation,
    degraded: tuple[str, str] | None,
) -> tuple[list[Condition], list[Event]]:
    """The conditions of ``status`` after a step from ``before``, and the events to post.

    ``degraded`` is the (reason, message) the step set, if any: a new one is a Warning event.
    """
    phase, message = status.phase, status.message
    now, generation = observation.now, observation.generation
    ready = phase in _READY_PHASES
    progressing = phase in _PROGRESSING_PHASES
    rescaling = status.transition is not None and status.transition.kind is Transition.RESCALE
    wanted = [
        _ConditionSpec(
            ConditionType.READY,
            ConditionStatus.TRUE if ready else ConditionStatus.FALSE,
            "Running" if ready else phase.value,
            message,
        ),
        _ConditionSpec(
            ConditionType.PROGRESSING,
            ConditionStatus.TRUE if progressing else ConditionStatus.FALSE,
            "Rescaling" if progressing and rescaling else phase.value,
            message,
        ),
    ]
    if degraded is not None:
        reason, text = degraded
        wanted.append(
            _ConditionSpec(ConditionType.DEGRADED, ConditionStatus.TRUE, reason, text, generation)
        )
    else:
        wanted.append(
            _ConditionSpec(ConditionType.DEGRADED, ConditionStatus.FALSE, "AsExpected", "")
        )
    previous = {condition.type: condition for condition in before.conditions}
    conditions: list[Condition] = []
    events: list[Event] = []
    for item in wanted:
        old = previous.get(item.type)
        changed = old is None or old.status is not item.status
        conditions.append(
            Condition(
                type=item.type,
                status=item.status,
                reason=item.reason,
                message=item.message,
                last_transition_time=now if changed or old is None else old.last_transition_time,
                observed_generation=item.generation,
            )
        )
        if (
            item.type is ConditionType.DEGRADED
            and item.status is ConditionStatus.TRUE
            and (changed or (old is not None and old.reason != item.reason))
        ):
            events.append(Event("Warning", item.reason, item.message))
    return conditions, events
