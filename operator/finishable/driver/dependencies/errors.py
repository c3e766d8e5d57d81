"""Why a driver could not start the program: a cause a restart may cure, or one it cannot.

Raised before the program (and Spark) start, so they cannot be pyspark's errors: the driver
reports a :class:`StartRefused` as permanent itself, and the job fails at once with its message
instead of spending the restart budget on the same wrong digest or missing file.
"""

from __future__ import annotations


class DriverError(RuntimeError):
    """The driver cannot start the program; the message names the field and the URL. A new
    attempt may succeed (an unreachable server, a timeout)."""


class StartRefused(DriverError):
    """No restart can cure this: a file that is not where the spec says, a digest that differs,
    a Python environment that does not fit the image, a package no repository has."""
