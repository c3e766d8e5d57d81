"""Operator events: the typed, JSON-serialisable messages between reader attempts and coordinators.

They mirror FLIP-27's source events. Readers pull (``RequestSplit``), the enumerator answers
(``AddSplits`` or ``NoMoreSplits``), readers report progress (``SplitFinished``). The wire form is
``{"type": <class name>, ...fields}`` so non-Python clients can speak it too.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from finishable.coordinator._json import (
    JsonFieldError,
    as_object,
    get_int,
    get_list,
    get_str,
)
from finishable.coordinator.errors import EventDecodeError
from finishable.coordinator.splits import Split, split_from_json

MAX_SPLITS_PER_REQUEST = 100_000
"""Upper bound of ``RequestSplit.max_splits``: a planner asking for 'all' stays bounded."""


class OperatorEvent(ABC):
    """An event between a coordinator and one subtask attempt."""

    type_name: ClassVar[str]

    @abstractmethod
    def fields_json(self) -> dict[str, Any]:
        """The event's fields (without ``type``)."""

    @classmethod
    @abstractmethod
    def from_fields(cls, obj: dict[str, Any], where: str) -> OperatorEvent:
        """Build the event from its JSON fields; raise ``JsonFieldError`` naming a bad field."""

    def to_json(self) -> dict[str, Any]:
        """JSON form: ``{"type": ..., <fields>}``."""
        return {"type": self.type_name, **self.fields_json()}


_EVENT_TYPES: dict[str, type[OperatorEvent]] = {}

E = TypeVar("E", bound=type[OperatorEvent])


def register_event(cls: E) -> E:
    """Make an event type decodable by ``event_from_json`` (other coordinators add their own)."""
    existing = _EVENT_TYPES.get(cls.type_name)
    if existing is not None and existing is not cls:
        raise ValueError(f"event type {cls.type_name!r} is already registered")
    _EVENT_TYPES[cls.type_name] = cls
    return cls


def event_from_json(value: object, where: str = "event") -> OperatorEvent:
    """Decode an event; raise ``EventDecodeError`` naming the bad field."""
    try:
        obj = as_object(value, where)
        type_name = get_str(obj, "type", where)
        cls = _EVENT_TYPES.get(type_name)
        if cls is None:
            known = ", ".join(sorted(_EVENT_TYPES))
            raise JsonFieldError(f"{where}.type: unknown event type {type_name!r} (known: {known})")
        return cls.from_fields(obj, where)
    except JsonFieldError as error:
        raise EventDecodeError(str(error)) from None


def event_to_json(event: OperatorEvent) -> dict[str, Any]:
    """Encode an event (the inverse of ``event_from_json``)."""
    return event.to_json()


@register_event
@dataclass(frozen=True, slots=True)
class RequestSplit(OperatorEvent):
    """A reader attempt asks for work (FLIP-27's 'backwards event'); splits are never pushed.

    ``max_splits`` lets a planner take several small splits at once, since every Spark task costs
    tens of milliseconds and small splits should be grouped.
    """

    type_name: ClassVar[str] = "RequestSplit"

    subtask: int
    attempt: int
    max_splits: int = 1

    def __post_init__(self) -> None:
        if self.subtask < 0 or self.attempt < 0:
            raise ValueError("subtask and attempt must not be negative")
        if not 1 <= self.max_splits <= MAX_SPLITS_PER_REQUEST:
            raise ValueError(
                f"max_splits must be between 1 and {MAX_SPLITS_PER_REQUEST}, got {self.max_splits}"
            )

    def fields_json(self) -> dict[str, Any]:
        return {"subtask": self.subtask, "attempt": self.attempt, "max_splits": self.max_splits}

    @classmethod
    def from_fields(cls, obj: dict[str, Any], where: str) -> RequestSplit:
        try:
            return cls(
                subtask=get_int(obj, "subtask", where),
                attempt=get_int(obj, "attempt", where),
                max_splits=get_int(obj, "max_splits", where, default=1),
            )
        except ValueError as error:
            if isinstance(error, JsonFieldError):
                raise
            raise JsonFieldError(f"{where}: {error}") from None


@register_event
@dataclass(frozen=True, slots=True)
class AddSplits(OperatorEvent):
    """Splits now owned by the attempt; an empty tuple means 'nothing yet, ask again later'."""

    type_name: ClassVar[str] = "AddSplits"

    splits: tuple[Split, ...]

    def fields_json(self) -> dict[str, Any]:
        return {"splits": [split.to_json() for split in self.splits]}

    @classmethod
    def from_fields(cls, obj: dict[str, Any], where: str) -> AddSplits:
        items = get_list(obj, "splits", where)
        splits = []
        for index, item in enumerate(items):
            try:
                splits.append(split_from_json(item, f"{where}.splits[{index}]"))
            except EventDecodeError as error:
                raise JsonFieldError(str(error)) from None
        return cls(splits=tuple(splits))


@register_event
@dataclass(frozen=True, slots=True)
class NoMoreSplits(OperatorEvent):
    """A bounded source has nothing left for this attempt: the reader may finish."""

    type_name: ClassVar[str] = "NoMoreSplits"

    def fields_json(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_fields(cls, obj: dict[str, Any], where: str) -> NoMoreSplits:
        return cls()


@register_event
@dataclass(frozen=True, slots=True)
class SplitFinished(OperatorEvent):
    """The attempt has durably processed these splits; they must never be read again.

    Report it before the checkpoint that should include it: a subtask reset to a checkpoint taken
    before the report makes the split pending again.
    """

    type_name: ClassVar[str] = "SplitFinished"

    split_ids: tuple[str, ...]

    def fields_json(self) -> dict[str, Any]:
        return {"split_ids": list(self.split_ids)}

    @classmethod
    def from_fields(cls, obj: dict[str, Any], where: str) -> SplitFinished:
        items = get_list(obj, "split_ids", where)
        for index, item in enumerate(items):
            if not isinstance(item, str) or not item:
                raise JsonFieldError(f"{where}.split_ids[{index}]: expected a split id string")
        return cls(split_ids=tuple(items))


@register_event
@dataclass(frozen=True, slots=True)
class SplitSkipped(OperatorEvent):
    """A reader could not read a split and skipped it (``on_error="skip"``); ``reason`` says why.

    Only a report: the split still ends with its batch (``SplitFinished``), so it is not retried;
    the coordinator keeps the reason for the job status. Reporting the same split again (a task
    retry, a replayed batch) is harmless.
    """

    type_name: ClassVar[str] = "SplitSkipped"

    split_id: str
    reason: str

    def __post_init__(self) -> None:
        if not self.split_id:
            raise ValueError("a skipped split needs its id")

    def fields_json(self) -> dict[str, Any]:
        return {"split_id": self.split_id, "reason": self.reason}

    @classmethod
    def from_fields(cls, obj: dict[str, Any], where: str) -> SplitSkipped:
        split_id = get_str(obj, "split_id", where)
        if not split_id:
            raise JsonFieldError(f"{where}.split_id: expected a split id string")
        return cls(split_id=split_id, reason=get_str(obj, "reason", where))
