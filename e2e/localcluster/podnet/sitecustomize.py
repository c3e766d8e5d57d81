"""Pod networking for the processes of the local cluster's process kubelet.

Python imports ``sitecustomize`` at start-up from ``PYTHONPATH``; the kubelet puts this directory
there for every container it starts (and Spark hands ``PYTHONPATH`` on to its Python workers). It
gives each pod what a network namespace and cluster DNS would:

* names under ``.svc`` (and ``.svc.cluster.local``) resolve through the hosts file the kubelet
  keeps (``$FINISHABLE_CLUSTER_HOSTS``: Services to their pods' IPs, StatefulSet pods by
  ``hostname.subdomain``); other names resolve as usual;
* binding the wildcard address ``0.0.0.0`` binds the pod's own loopback IP
  (``$FINISHABLE_POD_IP``, from 127.0.0.0/8), so two pods can both listen on one port.

Nothing else changes. It is standard library only: it runs before anything else is importable.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any

_HOSTS_FILE = os.environ.get("FINISHABLE_CLUSTER_HOSTS", "")
_POD_IP = os.environ.get("FINISHABLE_POD_IP", "")
_CLUSTER_SUFFIXES = (".svc", ".svc.cluster.local")
_cache: dict[str, Any] = {"mtime": -1, "hosts": {}}


def _hosts() -> dict[str, list[str]]:
    try:
        mtime = os.stat(_HOSTS_FILE).st_mtime_ns
    except OSError:
        return {}
    if mtime != _cache["mtime"]:
        try:
            with open(_HOSTS_FILE, encoding="utf-8") as file:
                _cache["hosts"] = json.load(file)
            _cache["mtime"] = mtime
        except (OSError, ValueError):
            return dict(_cache["hosts"])
    return dict(_cache["hosts"])


def _cluster_name(host: object) -> str | None:
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if not isinstance(host, str):
        return None
    name = host.rstrip(".").lower()
    if name.endswith(".cluster.local"):
        name = name[: -len(".cluster.local")]
    return name if name.endswith(".svc") else None


def _resolve(host: Any) -> Any:
    """The pod IP a cluster name stands for; other hosts unchanged."""
    name = _cluster_name(host)
    if name is None:
        return host
    addresses = _hosts().get(name)
    if not addresses:
        raise socket.gaierror(socket.EAI_NONAME, f"{host}: no such cluster name (yet)")
    return addresses[0]


_getaddrinfo = socket.getaddrinfo
_gethostbyname = socket.gethostbyname
_gethostbyname_ex = socket.gethostbyname_ex
_bind = socket.socket.bind


def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
    return _getaddrinfo(_resolve(host), *args, **kwargs)


def gethostbyname(host: str) -> str:
    return _gethostbyname(_resolve(host))


def gethostbyname_ex(host: str) -> tuple[str, list[str], list[str]]:
    return _gethostbyname_ex(_resolve(host))


def bind(self: socket.socket, address: Any) -> None:
    if (
        self.family == socket.AF_INET
        and isinstance(address, tuple)
        and address[0] in ("", "0.0.0.0")
    ):
        address = (_POD_IP, *address[1:])
    _bind(self, address)


if _HOSTS_FILE:
    socket.getaddrinfo = getaddrinfo
    socket.gethostbyname = gethostbyname
    socket.gethostbyname_ex = gethostbyname_ex
if _POD_IP:
    socket.socket.bind = bind  # type: ignore[method-assign,assignment]
