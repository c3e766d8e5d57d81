"""Every test run checks the tiers (testcluster/tiers.py), then runs the one ``--tier`` names."""

from __future__ import annotations

import pytest

from testcluster.tiers import SELECTIONS, OutOfTier, tier_of, tier_report


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--tier",
        choices=sorted(SELECTIONS),
        default="all",
        help="quick: what make test runs; full: what only make test-all adds; all (default): both",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test out of tier fails the run; the others not of the chosen tier are deselected."""
    wanted = SELECTIONS[config.getoption("--tier")]
    problems: list[str] = []
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        levels = [[mark.name for mark in node.own_markers] for node in reversed(item.listchain())]
        try:
            (kept if tier_of(item.nodeid, levels) in wanted else dropped).append(item)
        except OutOfTier as problem:
            problems.append(str(problem))
    if problems:
        raise pytest.UsageError(tier_report(problems))
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
