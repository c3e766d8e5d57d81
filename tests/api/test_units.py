"""Durations and quantities: parsing, canonical text, errors that quote the bad value."""

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from finishable.api.units import Duration, Quantity

pytestmark = pytest.mark.quick


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500ms", timedelta(milliseconds=500)),
        ("30s", timedelta(seconds=30)),
        ("5m", timedelta(minutes=5)),
        ("1h", timedelta(hours=1)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1.5s", timedelta(milliseconds=1500)),
        ("2d", timedelta(days=2)),
        (" 10s ", timedelta(seconds=10)),
    ],
)
def test_duration_parses(text: str, expected: timedelta) -> None:
    assert Duration.parse(text) == expected


@pytest.mark.parametrize(
    ("value", "canonical"),
    [("500ms", "500ms"), ("90s", "1m30s"), ("60m", "1h"), ("0s", "0s"), ("1h0m5s", "1h5s")],
)
def test_duration_prints_canonically(value: str, canonical: str) -> None:
    assert str(Duration.parse(value)) == canonical


@pytest.mark.parametrize("bad", ["10", "10x", "", "s", "1 h", "-5s", "ten seconds", 10, None, True])
def test_duration_errors_quote_the_value(bad: object) -> None:
    with pytest.raises(ValueError, match="is not a duration") as caught:
        Duration.parse(bad)
    assert repr(bad) in str(caught.value)


@given(st.integers(min_value=0, max_value=10**10))
def test_duration_round_trips(millis: int) -> None:
    duration = Duration(milliseconds=millis)
    assert Duration.parse(str(duration)) == duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("512Ki", 512 * 1024),
        ("1Mi", 1024**2),
        ("10Gi", 10 * 1024**3),
        ("2g", 2 * 1024**3),
        ("512m", 512 * 1024**2),
        ("1G", 10**9),
        ("1.5Gi", 3 * 1024**3 // 2),
        ("100", 100),
        ("4gb", 4 * 1024**3),
        (2048, 2048),
    ],
)
def test_quantity_parses(text: object, expected: int) -> None:
    assert Quantity.parse(text) == expected


@pytest.mark.parametrize("bad", ["2 gigs", "1Qi", "-1Mi", "", "Mi", -5, 1.5, True, None])
def test_quantity_errors_quote_the_value(bad: object) -> None:
    with pytest.raises(ValueError, match="is not a quantity") as caught:
        Quantity.parse(bad)
    assert repr(bad) in str(caught.value)


def test_quantity_canonical_and_spark_forms() -> None:
    assert str(Quantity.parse("2g")) == "2Gi"
    assert str(Quantity.parse("1536Mi")) == "1536Mi"
    assert str(Quantity.parse("1000")) == "1000"
    assert Quantity.parse("2Gi").spark_memory() == "2g"
    assert Quantity.parse("1536Mi").spark_memory() == "1536m"
    assert Quantity.parse("1").spark_memory() == "1m"


@given(st.integers(min_value=0, max_value=2**50))
def test_quantity_round_trips(size: int) -> None:
    assert Quantity.parse(str(Quantity(size))) == size
