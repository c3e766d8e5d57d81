"""What `finishable run` says of a Batch driver's stage progress, from the driver's report."""

from __future__ import annotations

import pytest

from finishable.api.control import DriverReport, DriverState
from finishable.local.runner import stage_progress

pytestmark = pytest.mark.quick


def report(message: str, attempt: int = 2) -> DriverReport:
    return DriverReport(attempt=attempt, state=DriverState.RUNNING, message=message)


def test_a_stage_report_is_said_with_its_attempt() -> None:
    assert stage_progress(report("stage paid: 3/8 tasks done")) == (
        "attempt 2: stage paid: 3/8 tasks done"
    )


@pytest.mark.parametrize("message", ["", "splits: 24 of 24 finished", "output committed"])
def test_other_reports_say_nothing_of_stages(message: str) -> None:
    assert stage_progress(report(message)) is None
    assert stage_progress(None) is None
