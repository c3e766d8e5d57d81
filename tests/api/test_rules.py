"""The rule expressions: each renders as the CEL the API server runs and evaluates in Python with
CEL's meaning (tests/api/test_admission.py holds every real rule against a real API server)."""

from __future__ import annotations

import pytest

from finishable.api.rules import (
    Absent,
    Not,
    Rule,
    RuleViolations,
    all_of,
    any_of,
    check,
    field,
    has,
    implies,
)

pytestmark = pytest.mark.quick


def test_a_field_that_may_be_absent_is_read_only_behind_has() -> None:
    guarded = implies(has(field("a.b")), field("a.b").eq("x"))
    assert guarded.cel() == "(!(has(self.a) && has(self.a.b)) || (self.a.b == 'x'))"
    assert guarded.eval({"self": {}}) is True
    assert guarded.eval({"self": {"a": {"b": "y"}}}) is False
    with pytest.raises(Absent, match="no such key: b"):
        field("a.b").eq("x").eval({"self": {"a": {}}})


def test_and_or_and_the_macros_treat_errors_as_cel_does() -> None:
    absent = field("missing").eq(1)
    assert all_of(absent, field("zero").eq(1)).eval({"self": {"zero": 0}}) is False
    assert any_of(absent, field("zero").eq(0)).eval({"self": {"zero": 0}}) is True
    with pytest.raises(Absent):
        all_of(absent, field("zero").eq(0)).eval({"self": {"zero": 0}})
    items = field("items").all(lambda item: item.at("n").le(2))
    assert items.cel() == "self.items.all(x1, (x1.n <= 2))"
    assert items.eval({"self": {"items": [{"n": 3}, {}]}}) is False, "one false decides"
    with pytest.raises(Absent):
        items.eval({"self": {"items": [{"n": 1}, {}]}})


def test_macros_nest_with_their_own_variables_and_range_over_map_keys() -> None:
    nested = field("pods").exists(lambda pod: pod.at("ports").exists(lambda port: port.eq(80)))
    assert nested.cel() == "self.pods.exists(x1, x1.ports.exists(x2, (x2 == 80)))"
    assert nested.eval({"self": {"pods": [{"ports": [1]}, {"ports": [80]}]}}) is True
    labels = field("labels").filter(lambda key: key.starts_with("finishable.dev/")).first()
    assert labels.eval({"self": {"labels": {"team": "a", "finishable.dev/job": "b"}}}) == (
        "finishable.dev/job"
    )


def test_a_rule_names_its_values_in_both_forms() -> None:
    rule = Rule(
        field("low").le(field("high")),
        ("low (", field("low"), ") is above high (", field("high"), "); 100% sure"),
        field=".low",
    )
    entry = rule.crd()
    assert entry["rule"] == "(self.low <= self.high)"
    assert entry["messageExpression"] == (
        "'low (%s) is above high (%s); 100%% sure'.format([self.low, self.high])"
    )
    assert entry["fieldPath"] == ".low" and entry["reason"] == "FieldValueInvalid"
    assert rule.violation({"low": 3, "high": 2}) == "low (3) is above high (2); 100% sure"
    assert rule.violation({"low": 1, "high": 2}) is None
    with pytest.raises(RuleViolations) as broken:
        check([rule, Rule(Not(has(field("x"))), ("no x",))], {"low": 3, "high": 2, "x": 1})
    assert [message for _, message in broken.value.broken] == [
        "low (3) is above high (2); 100% sure",
        "no x",
    ]


def test_strings_are_quoted_for_cel() -> None:
    assert field("a").eq("it's \\ here").cel() == "(self.a == 'it\\'s \\\\ here')"
