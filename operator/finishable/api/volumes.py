"""Driver volumes declared the way Spark on Kubernetes declares them, in ``sparkConf``.

Spark's own keys ``spark.kubernetes.{driver,executor}.volumes.[type].[name].mount.path`` (with
``mount.readOnly``, ``mount.subPath`` and ``options.*``) mount volumes into its pods. Spark
applies the executor ones itself; the driver pod is the operator's (Spark runs in client mode
inside it), so the operator reads the driver ones and builds them into that pod. One convention
for both, and a manifest written for spark-submit keeps working.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

DRIVER_VOLUME_PREFIX = "spark.kubernetes.driver.volumes."
VOLUME_TYPES = ("hostPath", "emptyDir", "persistentVolumeClaim", "nfs")
_MOUNT_KEYS = ("path", "readOnly", "subPath", "subPathExpr")
# The options Spark understands per volume type, and the pod field each one becomes.
_OPTIONS: dict[str, dict[str, str]] = {
    "hostPath": {"path": "path", "type": "type"},
    "emptyDir": {"medium": "medium", "sizeLimit": "sizeLimit"},
    "persistentVolumeClaim": {"claimName": "claimName"},
    "nfs": {"server": "server", "path": "path"},
}
_REQUIRED: dict[str, tuple[str, ...]] = {
    "hostPath": ("path",),
    "emptyDir": (),
    "persistentVolumeClaim": ("claimName",),
    "nfs": ("server", "path"),
}
_BOOLEANS = ("true", "false")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
RESERVED_NAMES = ("config", "work")  # the driver pod's own volumes


class VolumeConfError(ValueError):
    """A ``spark.kubernetes.driver.volumes.*`` key or value that cannot become a volume."""


@dataclass
class DriverVolume:
    """One volume of the driver pod and where it is mounted."""

    type: str
    name: str
    mount: dict[str, str] = field(default_factory=dict)
    options: dict[str, str] = field(default_factory=dict)

    def volume(self) -> dict[str, Any]:
        source: dict[str, Any] = {_OPTIONS[self.type][k]: v for k, v in self.options.items()}
        if self.type == "nfs" and self.mount.get("readOnly") == "true":
            source["readOnly"] = True
        return {"name": self.name, self.type: source}

    def volume_mount(self) -> dict[str, Any]:
        mount: dict[str, Any] = {"name": self.name, "mountPath": self.mount["path"]}
        if self.mount.get("readOnly") == "true":
            mount["readOnly"] = True
        for key in ("subPath", "subPathExpr"):
            if key in self.mount:
                mount[key] = self.mount[key]
        return mount


def driver_volumes(spark_conf: dict[str, str]) -> list[DriverVolume]:
    """The driver volumes the conf declares, in name order; a bad key raises naming it."""
    volumes: dict[str, DriverVolume] = {}
    for key, value in sorted(spark_conf.items()):
        if not key.startswith(DRIVER_VOLUME_PREFIX):
            continue
        parts = key[len(DRIVER_VOLUME_PREFIX) :].split(".")
        if len(parts) != 4 or parts[2] not in ("mount", "options"):
            raise VolumeConfError(
                f"{key!r} is not spark.kubernetes.driver.volumes.[type].[name]."
                "mount.<key> or .options.<key>"
            )
        kind, name, section, item = parts
        if kind not in VOLUME_TYPES:
            raise VolumeConfError(
                f"{key!r}: the volume type {kind!r} is not one of {', '.join(VOLUME_TYPES)}"
            )
        allowed = _MOUNT_KEYS if section == "mount" else tuple(_OPTIONS[kind])
        if item not in allowed:
            raise VolumeConfError(
                f"{key!r}: {section}.{item} is not one of "
                f"{', '.join(f'{section}.{a}' for a in allowed)} for a {kind} volume"
            )
        if section == "mount" and item == "readOnly" and value not in _BOOLEANS:
            raise VolumeConfError(f"{key!r}: {value!r} must be true or false")
        if not _DNS_LABEL.fullmatch(name) or len(name) > 63 or name in RESERVED_NAMES:
            raise VolumeConfError(
                f"{key!r}: the volume name {name!r} must be a DNS label (lower-case letters, "
                f"digits and '-') other than {' and '.join(RESERVED_NAMES)}"
            )
        volume = volumes.setdefault(name, DriverVolume(kind, name))
        if volume.type != kind:
            raise VolumeConfError(
                f"{key!r}: the volume {name!r} is declared both as {volume.type} and as {kind}"
            )
        (volume.mount if section == "mount" else volume.options)[item] = value
    for volume in volumes.values():
        prefix = f"{DRIVER_VOLUME_PREFIX}{volume.type}.{volume.name}"
        path = volume.mount.get("path", "")
        if not path.startswith("/"):
            raise VolumeConfError(f"{prefix}.mount.path must be an absolute path; got {path!r}")
        missing = [o for o in _REQUIRED[volume.type] if not volume.options.get(o)]
        if missing:
            raise VolumeConfError(
                f"{prefix}: a {volume.type} volume needs "
                f"{', '.join(f'{prefix}.options.{o}' for o in missing)}"
            )
    return list(volumes.values())
