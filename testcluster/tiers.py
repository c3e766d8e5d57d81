"""The two test tiers, and the rule that puts every test in exactly one of them by a marker.

``quick`` is what ``make test`` runs (CI, every change); ``full`` is what only ``make test-all``
adds (kill sweeps, every e2e flow, long streaming runs). A module's ``pytestmark`` gives its tests
their tier, and a test or parameter marked itself overrides it (the closest marker decides). A
test in no tier would silently drop out of ``make test`` and be forgotten; one whose own markers
name both is ambiguous: either is an error of the whole run, whichever tier it was started for.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

TIERS = ("quick", "full")
SELECTIONS = {"quick": {"quick"}, "full": {"full"}, "all": {"quick", "full"}}
SHOWN = 20


class OutOfTier(ValueError):
    """A test in no tier, or with both tiers on the same node."""


def tier_of(nodeid: str, levels: Sequence[Iterable[str]]) -> str:
    """The tier of test ``nodeid`` from its nodes' own marker names, the test's own first."""
    for names in levels:
        marked = [tier for tier in TIERS if tier in set(names)]
        if len(marked) > 1:
            raise OutOfTier(f"{nodeid}: marked {' and '.join(marked)} at once: keep one")
        if marked:
            return marked[0]
    raise OutOfTier(f"{nodeid}: in no tier: mark it pytest.mark.quick or pytest.mark.full")


def tier_report(problems: list[str]) -> str:
    """One message for every test out of tier (the first ``SHOWN`` of them named)."""
    more = f"\n... and {len(problems) - SHOWN} more" if len(problems) > SHOWN else ""
    shown = "\n".join(problems[:SHOWN])
    return f"{len(problems)} test(s) not in exactly one tier:\n{shown}{more}"
