"""Finding the programs the tests run for real (helm, kubectl, prometheus, promtool, shellcheck).

A missing one fails the test with the command that installs it, never skips it: CI installs them
all (``make tools``), and a skip there would pass without the check ever running."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
INSTALL = {
    "kubectl": "make tools (the pinned kubectl v1.33.9 into .venv/bin)",
    "helm": "make tools (the pinned helm v4.1.4 into .venv/bin)",
    "prometheus": "make tools (or: apt-get install prometheus)",
    "promtool": "make tools (or: apt-get install prometheus)",
    "shellcheck": "make tools (or: apt-get install shellcheck)",
}


def find(name: str) -> str | None:
    """The path of ``name``: .venv/bin first (the pinned builds), then $NAME, then $PATH."""
    for candidate in (ROOT / ".venv" / "bin" / name, os.environ.get(name.upper())):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    return shutil.which(name)


def missing(name: str) -> str:
    return f"{name} is missing: {INSTALL.get(name, f'install {name}')}"


def installed(name: str) -> str:
    """:func:`find`, failing the test when ``name`` is not there."""
    found = find(name)
    if found is None:
        pytest.fail(missing(name))
    return found
