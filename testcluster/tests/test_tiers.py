"""Every test is in exactly one tier (testcluster/tiers.py): the closest marker decides."""

from __future__ import annotations

import pytest

from testcluster.tiers import SHOWN, OutOfTier, tier_of, tier_report

pytestmark = pytest.mark.quick


def test_the_module_marker_gives_the_tier() -> None:
    assert tier_of("t.py::a", [["parametrize"], ["quick", "e2e"], []]) == "quick"


def test_a_tests_own_marker_overrides_its_modules() -> None:
    assert tier_of("t.py::a", [["full"], ["quick"]]) == "full"
    assert tier_of("t.py::a[1]", [["quick", "parametrize"], ["full"]]) == "quick"


def test_a_test_in_no_tier_is_named_with_what_to_do() -> None:
    with pytest.raises(OutOfTier, match=r"t\.py::a: in no tier: mark it pytest\.mark\.quick"):
        tier_of("t.py::a", [["parametrize"], ["e2e"], []])


def test_both_tiers_on_one_node_are_refused() -> None:
    with pytest.raises(OutOfTier, match=r"t\.py::a: marked quick and full at once"):
        tier_of("t.py::a", [["quick", "full"], ["quick"]])


def test_the_report_names_the_first_problems_and_counts_the_rest() -> None:
    problems = [f"t.py::a{n}: in no tier" for n in range(SHOWN + 3)]
    report = tier_report(problems)
    assert report.startswith(f"{SHOWN + 3} test(s) not in exactly one tier:")
    assert "t.py::a0: in no tier" in report and f"t.py::a{SHOWN}:" not in report
    assert report.endswith("... and 3 more")
