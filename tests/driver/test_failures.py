"""Which driver failures a restart cannot cure: the classification the driver reports."""

import pytest
from pyspark.errors import AnalysisException, ParseException

from finishable.driver.failures import PermanentFailure, ProgramError, is_permanent
from finishable.driver.outcome import JobFailed
from finishable.driver.streaming.checkpoints import SavepointUnreachable, UnrestorableSavepoint
from finishable.state import StateError

pytestmark = pytest.mark.quick


@pytest.mark.parametrize(
    "error",
    [
        AnalysisException(message="[UNRESOLVED_COLUMN] `pgae` cannot be resolved"),
        ParseException(message="syntax error at 'SELEC'"),
        ProgramError("job.read() builds Batch jobs"),
        PermanentFailure("stage 'parse' planned 4 tasks, the log says 8"),
        UnrestorableSavepoint("no savepoint at /nowhere/sp-1.blob"),
        NameError("name 'pages' is not defined"),
        ModuleNotFoundError("No module named 'pandsa'"),
    ],
    ids=lambda error: type(error).__name__,
)
def test_errors_that_come_back_every_time_are_permanent(error: BaseException) -> None:
    assert is_permanent(error)


@pytest.mark.parametrize(
    "error",
    [
        JobFailed("the query failed: executor lost"),
        OSError("connection reset by peer"),
        StateError("the ConfigMap store did not answer"),
        SavepointUnreachable("cannot read the savepoint at s3://b/sp-1.blob: timed out"),
        RuntimeError("the JVM died"),
    ],
    ids=lambda error: type(error).__name__,
)
def test_everything_else_is_left_to_the_restart_budget(error: BaseException) -> None:
    assert not is_permanent(error)


def test_the_cause_of_a_wrapped_error_decides() -> None:
    try:
        try:
            raise AnalysisException(message="`pgae` cannot be resolved")
        except AnalysisException as cause:
            raise JobFailed("the query failed to start") from cause
    except JobFailed as error:
        assert is_permanent(error)
    # An error merely handled while another was raised is not the cause.
    try:
        try:
            raise AnalysisException(message="handled")
        except AnalysisException:
            raise OSError("disk full") from None
    except OSError as error:
        assert not is_permanent(error)


def test_program_errors_stay_the_types_programs_caught_before() -> None:
    assert isinstance(ProgramError("x"), TypeError)
    assert isinstance(ProgramError("x"), ValueError)
