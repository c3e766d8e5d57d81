"""Process helpers shared by tests that SIGKILL things."""

from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """Whether a process with this id exists (a zombie counts until it is reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
