"""Pod networking for the Python processes of the local cluster's process runtime.

Python imports ``sitecustomize`` at start-up from ``PYTHONPATH``; the kubelet puts this directory
there for every container it starts (and Spark hands ``PYTHONPATH`` on to its Python workers).
Every pod has an address of its own in 127.0.0.0/8 (``$PODNET_IP``) but shares the host's
network namespace, so binding the wildcard address ``0.0.0.0`` binds the pod's own address here:
two pods can then both listen on one port, as they can on a cluster. Names resolve through the
pod's ``/etc/hosts``, which the kubelet keeps (cluster DNS).

It is standard library only: it runs before anything else is importable.
"""

from __future__ import annotations

import os
import socket
from typing import Any

_POD_IP = os.environ.get("PODNET_IP", "")
_bind = socket.socket.bind


def bind(self: socket.socket, address: Any) -> None:
    if (
        self.family == socket.AF_INET
        and isinstance(address, tuple)
        and address[0] in ("", "0.0.0.0")
    ):
        address = (_POD_IP, *address[1:])
    _bind(self, address)


if _POD_IP:
    socket.socket.bind = bind  # type: ignore[method-assign,assignment]
