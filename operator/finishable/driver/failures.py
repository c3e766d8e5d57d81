"""Which failures of a driver a restart can cure, and which it cannot.

Restarting a driver whose program has a typo, whose query does not analyse or whose savepoint
cannot be read spends the restart budget and minutes of backoff on an error that comes back
every time. Those are *permanent*: the driver says so in its report and the job is Failed at
once, with the reason. Everything else (a lost executor, an unreachable store, a JVM that died)
is transient and goes through the restart budget. When in doubt, transient: a wrong "transient"
costs a few restarts, a wrong "permanent" stops a job that would have recovered.
"""

from __future__ import annotations

from pyspark.errors import AnalysisException, PySparkTypeError, PySparkValueError

from finishable.driver.outcome import JobFailed


class PermanentError(Exception):
    """Marks an error a restart of the driver cannot cure."""


class ProgramError(PermanentError, TypeError, ValueError):
    """The program uses the job API in a way that can never work; the message says how to fix
    it. A ``TypeError`` and ``ValueError`` as well, which is what it raised before it existed."""


class PermanentFailure(PermanentError, JobFailed):
    """The job cannot go on, and a new attempt would stop at the same place (a start behind
    its sink, a stage planned differently from the attempt that logged it)."""


_PERMANENT = (
    PermanentError,
    AnalysisException,  # and ParseException: the query does not analyse
    PySparkTypeError,  # pyspark's API called with the wrong types
    PySparkValueError,
    SyntaxError,
    ImportError,
    NameError,
)


def is_permanent(error: BaseException) -> bool:
    """Whether ``error``, or the error it was raised from, is one a restart cannot cure."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, _PERMANENT):
            return True
        seen.add(id(current))
        current = current.__cause__
    return False
