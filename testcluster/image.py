"""The project's image, built as ``make image`` builds it (``docker/build-image.sh``: it starts
the docker daemon, or installs it, when needed): by the image tests and by the e2e tier when it
runs pods as containers. A second build in one run is a cache hit."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "finishable-spark-operator:0.1.0"  # the image the chart, the examples and e2e name
BUILD_TIMEOUT = 1800


class BuildFailed(RuntimeError):
    """``make image`` failed; the message ends with its output."""


def build(image: str = IMAGE) -> str:
    """Build and try ``image``; what the script printed (its name and size)."""
    result = subprocess.run(
        ["sh", str(ROOT / "docker" / "build-image.sh"), image],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
    )
    if result.returncode != 0:
        raise BuildFailed(f"make image failed:\n{result.stderr[-4000:]}")
    return result.stdout.strip()
