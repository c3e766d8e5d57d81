"""Container paths on a machine without containers: one mapping per pod, applied to strings.

A pod's processes share the host's file system, so every path a container would see (its volume
mounts, and the image's own files such as ``/opt/finishable/examples``) is given a host
directory, and the kubelet rewrites those paths wherever the pod names them: command, args,
environment values, working directory, and the files it projects from ConfigMaps and Secrets.
A path is rewritten only at a path boundary: ``/data`` in ``--input=/data/orders`` or
``"/data"``, never inside ``/database`` or ``http://host/data``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

# A path starts the text, follows a separator (``--input=/x``, ``"/x"``, ``a:/x``) or a file URL.
_BEFORE = r"(?:^|(?<=[=\"' ,\[(:])|(?<=file://)|(?<=local://))"


class PathMap:
    """Container path prefixes and the host paths that stand for them (longest prefix wins)."""

    def __init__(self, mapping: Mapping[str, Path | str]) -> None:
        self.mapping = {prefix.rstrip("/") or "/": str(host) for prefix, host in mapping.items()}
        prefixes = sorted(self.mapping, key=len, reverse=True)
        alternatives = "|".join(re.escape(prefix) for prefix in prefixes)
        self._pattern = (
            re.compile(rf"{_BEFORE}(?:{alternatives})(?=/|$|[^\w.-])") if prefixes else None
        )

    def translate(self, text: str) -> str:
        """``text`` with every mapped container path replaced by its host path."""
        if self._pattern is None:
            return text
        return self._pattern.sub(lambda match: self.mapping[match.group(0)], text)

    def host_path(self, container_path: str) -> Path:
        """Where a container path lives on the host (unmapped paths are the host's own)."""
        return Path(self.translate(container_path))
