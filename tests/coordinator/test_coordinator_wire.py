"""Operator events and splits: JSON round trips, stable ids, and errors that name the field."""

from __future__ import annotations

import hashlib
import json

import pytest

from finishable.coordinator import (
    AddSplits,
    EventDecodeError,
    FileSplit,
    NoMoreSplits,
    OperatorEvent,
    RangeSplit,
    RequestSplit,
    SplitFinished,
    event_from_json,
    split_from_json,
)

pytestmark = pytest.mark.quick

EVENTS: list[OperatorEvent] = [
    RequestSplit(subtask=3, attempt=1),
    RequestSplit(subtask=0, attempt=0, max_splits=50),
    AddSplits(()),
    AddSplits((RangeSplit(0, 10), FileSplit("file:///data/a.json", 0, 5, 5))),
    NoMoreSplits(),
    SplitFinished(("r-0-10", "f-abc")),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_events_round_trip_through_json_text(event: OperatorEvent) -> None:
    text = json.dumps(event.to_json())
    assert event_from_json(json.loads(text)) == event


def test_split_ids_are_stable_and_depend_only_on_contents() -> None:
    a = FileSplit("s3://bucket/x.json?endpoint_override=localhost%3A9000", 0, 100, 300)
    b = FileSplit("s3://bucket/x.json?endpoint_override=localhost%3A9000", 0, 100, 300)
    c = FileSplit("s3://bucket/x.json?endpoint_override=localhost%3A9000", 100, 100, 300)
    assert a.split_id == b.split_id != c.split_id
    assert a == b and hash(a) == hash(b)
    # The same id in another process: it is a hash of the contents, not of the object.
    assert (
        a.split_id
        == "f-"
        + hashlib.sha256(
            b"s3://bucket/x.json?endpoint_override=localhost%3A9000\x1f0\x1f100"
        ).hexdigest()[:24]
    )
    assert RangeSplit(5, 9).split_id == "r-5-9"
    assert split_from_json(a.to_json()) == a


@pytest.mark.parametrize(
    ("document", "fragment"),
    [
        ([], "event: expected a JSON object"),
        ({}, "event.type: missing"),
        ({"type": "Bogus"}, "event.type: unknown event type 'Bogus'"),
        ({"type": "RequestSplit", "attempt": 0}, "event.subtask: missing"),
        ({"type": "RequestSplit", "subtask": True, "attempt": 0}, "event.subtask: expected an"),
        ({"type": "RequestSplit", "subtask": "1", "attempt": 0}, "got the string '1'"),
        ({"type": "RequestSplit", "subtask": 0, "attempt": 0, "max_splits": 0}, "max_splits"),
        ({"type": "RequestSplit", "subtask": -1, "attempt": 0}, "must not be negative"),
        ({"type": "AddSplits"}, "event.splits: missing"),
        (
            {"type": "AddSplits", "splits": [{"kind": "range", "start": 0, "end": 1}, {}]},
            "event.splits[1].kind: missing",
        ),
        ({"type": "AddSplits", "splits": [{"kind": "tape"}]}, "unknown split kind 'tape'"),
        ({"type": "AddSplits", "splits": [{"kind": "range", "start": 4, "end": 4}]}, "is empty"),
        (
            {
                "type": "AddSplits",
                "splits": [{"kind": "range", "id": "r-0-2", "start": 0, "end": 1}],
            },
            "does not match",
        ),
        (
            {
                "type": "AddSplits",
                "splits": [
                    {"kind": "file", "url": "file:///a", "start": 5, "length": 10, "file_size": 8}
                ],
            },
            "outside the file",
        ),
        ({"type": "SplitFinished", "split_ids": ["ok", 3]}, "event.split_ids[1]"),
    ],
)
def test_malformed_events_are_refused_naming_the_field(document: object, fragment: str) -> None:
    with pytest.raises(EventDecodeError) as caught:
        event_from_json(document)
    assert fragment in str(caught.value)


def test_request_split_refuses_bad_values_in_python_too() -> None:
    with pytest.raises(ValueError, match="max_splits"):
        RequestSplit(0, 0, max_splits=0)
    with pytest.raises(ValueError, match="empty"):
        RangeSplit(3, 3)
