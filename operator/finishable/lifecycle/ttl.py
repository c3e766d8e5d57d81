"""How long a Finished or Failed job is kept (spec.ttlAfterFinished, spec.ttlAfterFailed, the
operator's defaults): pure, like the phase machine.

After each step of the phase machine the operator's job loop asks :func:`expiry` when the job is
to be deleted, and :func:`settle` puts the answer into the decision (``status.expiresAt``, an
Event when the deadline is new or moves); the deletion itself is a side effect at the edge
(:mod:`finishable.controller.job.expiry`). The deadline is the phase's start
(``status.phaseSince``) plus the time to live, so it survives an operator restart and follows an
edit of the setting at once. Only Finished and Failed jobs have one: a Failed job that restarts
leaves its clock behind, and a Suspended job waits for a resume, so it never expires.
``finishable run`` has nothing to delete and never asks.

Any edit restarts a Failed job (the phase machine's rule), except an edit of these two fields
alone: :func:`edits_ttl_only` tells one from the other by ``status.failedSpecHash``, a hash of
the spec without them, so that keeping a failed job longer does not run it again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from finishable.api.models import Phase
from finishable.api.status import FinishableSparkJobStatus
from finishable.api.units import Duration
from finishable.lifecycle.decisions import Decision, Event

FIELDS: Mapping[Phase, str] = {
    Phase.FINISHED: "ttlAfterFinished",
    Phase.FAILED: "ttlAfterFailed",
}
"""The spec field that says how long a job of each phase is kept."""


@dataclass(frozen=True)
class TimeToLive:
    """How long a job is kept once Finished and once Failed; None: for as long as it exists."""

    after_finished: Duration | None = None
    after_failed: Duration | None = None

    def of(self, phase: Phase) -> Duration | None:
        if phase is Phase.FINISHED:
            return self.after_finished
        if phase is Phase.FAILED:
            return self.after_failed
        return None


def time_to_live(spec: Mapping[str, Any] | None) -> TimeToLive:
    """A job's own settings, read from its spec as stored. A value that is no duration counts as
    unset: such a spec fails the job with a message naming the field, and a job whose spec
    cannot run is still cleaned up, as the operator's default says."""

    def read(phase: Phase) -> Duration | None:
        value = (spec or {}).get(FIELDS[phase])
        if value is None:
            return None
        try:
            return Duration.parse(value)
        except ValueError:
            return None

    return TimeToLive(read(Phase.FINISHED), read(Phase.FAILED))


@dataclass(frozen=True)
class Expiry:
    """When a Finished or Failed job is deleted, what says so, and how long is left."""

    at: datetime
    setting: str
    """For people: ``ttlAfterFinished 1h``, or ``ttlAfterFailed 7d, the operator's default``."""
    remaining: timedelta
    """Zero once the deadline has passed."""

    @property
    def expired(self) -> bool:
        return self.remaining <= timedelta(0)


def expiry(
    spec: TimeToLive, defaults: TimeToLive, status: FinishableSparkJobStatus, now: datetime
) -> Expiry | None:
    """When the job ``status`` describes is deleted, or None while it is kept: it is neither
    Finished nor Failed, neither its spec nor the operator sets a time to live for its phase, or
    its status has no ``phaseSince`` (written by hand: no clock to count from). The job's own
    setting wins over the operator's ``defaults``; ``0s`` deletes it at once."""
    field = FIELDS.get(status.phase)
    if field is None or status.phase_since is None:
        return None
    own = spec.of(status.phase)
    ttl = own if own is not None else defaults.of(status.phase)
    if ttl is None:
        return None
    setting = f"{field} {ttl}" if own is not None else f"{field} {ttl}, the operator's default"
    at = status.phase_since + ttl
    return Expiry(at=at, setting=setting, remaining=max(at - now, timedelta(0)))


def stamp(moment: datetime) -> str:
    """A time as Events and logs give it: UTC, to the second (2026-12-07T20:00:00Z)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def spec_hash(spec: Mapping[str, Any] | None) -> str:
    """A hash of the spec as stored, its two ttl fields left out: what an edit of the job
    changes, unless it changes only those."""
    rest = {key: value for key, value in (spec or {}).items() if key not in FIELDS.values()}
    canonical = json.dumps(rest, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def edits_ttl_only(
    status: FinishableSparkJobStatus, spec: Mapping[str, Any] | None, generation: int
) -> bool:
    """Whether the spec at ``generation`` differs from the one a Failed job's status was decided
    on in its ttl fields alone: an edit that moves the deadline and restarts nothing."""
    return (
        status.phase is Phase.FAILED
        and generation > status.observed_generation
        and status.failed_spec_hash is not None
        and status.failed_spec_hash == spec_hash(spec)
    )


def settle(
    decision: Decision,
    before: FinishableSparkJobStatus,
    found: Expiry | None,
    spec: Mapping[str, Any] | None,
    *,
    seen_generation: int | None = None,
) -> Decision:
    """The phase machine's ``decision`` with ``found`` in its status (``expiresAt``) and the
    Events that tell it: ``TTLScheduled`` when a deadline is new or moves (not once it has
    passed: the deletion tells that), ``TTLCancelled`` when a Finished or Failed job's deadline
    goes away. A Failed status keeps the hash of ``spec`` (:func:`edits_ttl_only`);
    ``seen_generation``: an edit of the ttl fields alone, recorded as observed."""
    updates: dict[str, Any] = {
        "expires_at": None if found is None else found.at,
        "failed_spec_hash": spec_hash(spec) if decision.status.phase is Phase.FAILED else None,
    }
    if seen_generation is not None:
        updates["observed_generation"] = seen_generation
    status = decision.status.model_copy(update=updates)
    events = list(decision.events)
    if found is not None and not found.expired and found.at != before.expires_at:
        message = f"will be deleted at {stamp(found.at)} ({found.setting})"
        events.append(Event("Normal", "TTLScheduled", message))
    elif found is None and before.expires_at is not None and status.phase in FIELDS:
        field = FIELDS[status.phase]
        message = f"kept: {field} is unset and the operator has no default for it"
        events.append(Event("Normal", "TTLCancelled", message))
    return replace(decision, status=status, events=tuple(events))
