"""What a kubelet derives from a pod spec before it starts a container: pure functions.

* :class:`Image`: what the container runtime would take from an image (its entrypoint, command,
  environment, working directory and files), since there are no images here;
* :func:`container_command`: the image's entrypoint and command combined with the container's
  ``command`` and ``args`` as Kubernetes combines them;
* :func:`expand`: ``$(VAR)`` references in ``env`` values, ``command`` and ``args``, with the
  kubelet's rules;
* :func:`hosts_file`: the pod's ``/etc/hosts``, which stands in for cluster DNS.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

CLUSTER_DOMAIN = "cluster.local"


@dataclass(frozen=True)
class Image:
    """An image as a container runtime would read it (the Dockerfile's ENTRYPOINT, CMD, ENV,
    WORKDIR and what it COPYs), with the host paths that stand for its files."""

    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    working_dir: str = "/"
    files: Mapping[str, Path] = field(default_factory=dict)  # container path -> host path
    dirs: tuple[str, ...] = ()  # directories the image has, empty and writable
    # Host directories the stand-in needs at their own paths, read-only: where this machine's
    # interpreter, pyspark and project live (they may be under /tmp, which a pod has of its own).
    host_paths: tuple[Path, ...] = ()


def container_command(
    image: Image, command: Sequence[str] | None, args: Sequence[str] | None
) -> list[str]:
    """The process a container runs: ``command`` replaces the image's entrypoint (and then its
    CMD is dropped too), ``args`` replace its CMD."""
    if command:
        return [*command, *(args or [])]
    return [*image.entrypoint, *(args if args else image.cmd)]


def expand(text: str, variables: Mapping[str, str]) -> str:
    """``$(VAR)`` replaced by its value when VAR is defined (left as written when not), ``$$``
    reduced to ``$`` (so ``$$(VAR)`` is the literal ``$(VAR)``), as the kubelet does."""
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char != "$" or index + 1 >= len(text):
            out.append(char)
            index += 1
            continue
        following = text[index + 1]
        if following == "$":
            out.append("$")
            index += 2
        elif following == "(":
            end = text.find(")", index + 2)
            if end == -1:  # an unclosed reference stays as written
                out.append(text[index:])
                break
            name = text[index + 2 : end]
            out.append(variables[name] if name in variables else text[index : end + 1])
            index = end + 1
        else:
            out.append(char)
            index += 1
    return "".join(out)


def service_environment(host: str, port: int) -> dict[str, str]:
    """What every container gets for the API server's Service (``kubernetes`` in ``default``)."""
    return {
        "KUBERNETES_SERVICE_HOST": host,
        "KUBERNETES_SERVICE_PORT": str(port),
        "KUBERNETES_SERVICE_PORT_HTTPS": str(port),
        "KUBERNETES_PORT": f"tcp://{host}:{port}",
    }


def hosts_file(
    ip: str,
    hostname: str,
    namespace: str,
    names: Mapping[str, Sequence[str]],
    subdomain: str | None = None,
) -> str:
    """A pod's ``/etc/hosts``: the kubelet's lines (localhost, the pod's own name) and, in place
    of cluster DNS, every Service and StatefulSet pod name (``NAME.NAMESPACE.svc``, as in
    ``names``) with its ``.cluster.local`` form, and the short names the pod's search path
    (``NAMESPACE.svc``, ``svc``) would resolve."""
    own = [hostname]
    if subdomain:
        own.insert(0, f"{hostname}.{subdomain}.{namespace}.svc.{CLUSTER_DOMAIN}")
    lines = [
        "# Kubernetes-managed hosts file (the local cluster's kubelet).",
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        f"{ip}\t{' '.join(own)}",
    ]
    for name in sorted(names):
        aliases = [name, f"{name}.{CLUSTER_DOMAIN}"]
        if name.endswith(f".{namespace}.svc"):
            short = name[: -len(".svc")]
            aliases += [short, short[: -len(f".{namespace}")]]
        for address in names[name]:
            lines.append(f"{address}\t{' '.join(aliases)}")
    return "\n".join(lines) + "\n"
