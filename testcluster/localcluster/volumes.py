"""What the kubelet reads from the API to start a pod's container: its volumes as host
directories (ConfigMap and Secret files, projected volumes with a ServiceAccount token from the
TokenRequest API, downward API files, emptyDir, hostPath, a directory per claim), and its
environment (``env`` with ``valueFrom`` and ``$(VAR)`` references, ``envFrom``, the API server's
Service variables). Anything the pod needs that does not exist yet raises :class:`NotReady`: the
pod stays ``Pending`` and is tried again, as a real kubelet does.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from finishable.kube.api import KubeApi
from testcluster.localcluster.podspec import expand

# An emptyDir, and a claim's directory as the local-path provisioner makes it: any user of the
# pod may write there (the image's user is not root).
WRITABLE_BY_ALL = 0o777


class NotReady(Exception):
    """Something the pod needs does not exist yet: it stays Pending, and is tried again."""


@dataclass
class PodRef:
    """The pod a container belongs to, and where the kubelet keeps its files."""

    namespace: str
    name: str
    uid: str
    ip: str
    directory: Path
    pod: dict[str, Any]
    token: str | None = None  # its ServiceAccount token (its projected volume's), once written
    volume_dirs: dict[str, Path] = field(default_factory=dict)

    @property
    def spec(self) -> dict[str, Any]:
        return dict(self.pod["spec"]["containers"][0])


def claim_dir(root: Path, namespace: str, claim: Mapping[str, Any]) -> Path:
    """Where the kubelet rooted at ``root`` keeps a claim's files (the local-path provisioner's
    layout: one directory per claim, named by the claim and its uid)."""
    meta = claim["metadata"]
    return root / "claims" / namespace / f"{meta['name']}-{meta['uid'][:8]}"


def data_of(plural: str, obj: Mapping[str, Any]) -> dict[str, bytes]:
    """A ConfigMap's or Secret's keys as bytes."""
    if plural == "secrets":
        data = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
        data |= {k: str(v).encode() for k, v in (obj.get("stringData") or {}).items()}
        return data
    data = {k: str(v).encode() for k, v in (obj.get("data") or {}).items()}
    data |= {k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()}
    return data


class PodVolumes:
    """Volumes and environment of pods, read through the API (see the module docstring)."""

    def __init__(self, api: KubeApi, root: Path, *, host_ip: str = "127.0.0.1") -> None:
        self.api = api
        self.root = root
        self.host_ip = host_ip  # the node's address (status.hostIP)

    # -- volumes ----------------------------------------------------------------------------

    def volume_dir(self, pod: PodRef, volume: dict[str, Any]) -> Path:
        """The host directory of one volume, its files written."""
        name = str(volume["name"])
        if name in pod.volume_dirs:
            return pod.volume_dirs[name]
        local = pod.directory / "volumes" / name
        if any(kind in volume for kind in ("emptyDir", "configMap", "secret", "projected")):
            local.mkdir(parents=True, exist_ok=True)
            if "emptyDir" in volume:
                local.chmod(WRITABLE_BY_ALL)
            if "configMap" in volume or "secret" in volume:
                self._project(pod, volume, local)
            if "projected" in volume:
                self._project_sources(pod, volume, local)
            directory = local
        elif "hostPath" in volume:
            directory = Path(volume["hostPath"]["path"])
            directory.mkdir(parents=True, exist_ok=True)
        elif "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]["claimName"]
            response = self.api.request(
                "GET", self.api.path("persistentvolumeclaims", claim, namespace=pod.namespace)
            )
            if response.status != 200:
                raise NotReady(f'persistentvolumeclaim "{claim}" not found')
            directory = self.claim_dir(pod.namespace, response.body)
            directory.mkdir(parents=True, exist_ok=True)
            directory.chmod(WRITABLE_BY_ALL)
        else:
            raise NotReady(
                f"volume {name!r}: only configMap, secret, projected, emptyDir, hostPath and "
                "persistentVolumeClaim volumes run here"
            )
        pod.volume_dirs[name] = directory
        return directory

    def claim_dir(self, namespace: str, claim: Mapping[str, Any]) -> Path:
        return claim_dir(self.root, namespace, claim)

    def _project(self, pod: PodRef, volume: dict[str, Any], target: Path) -> None:
        """Write a ConfigMap's or Secret's keys as files (all, or the ``items`` named)."""
        kind = "configMap" if "configMap" in volume else "secret"
        source = volume[kind]
        name = source.get("name") or source.get("secretName")
        plural = "configmaps" if kind == "configMap" else "secrets"
        obj = self._get(plural, name, pod.namespace, source.get("optional"))
        if obj is None:
            return
        files = data_of(plural, obj)
        items = source.get("items") or []
        missing = [item["key"] for item in items if item["key"] not in files]
        if missing:
            raise NotReady(f'{plural[:-1]} "{name}" has no key {", ".join(missing)}')
        selected = {item["path"]: files[item["key"]] for item in items} if items else files
        for relative, content in selected.items():
            path = target / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)

    def _project_sources(self, pod: PodRef, volume: dict[str, Any], target: Path) -> None:
        """A projected volume: a ServiceAccount token (requested through the TokenRequest API,
        bound to the pod), ConfigMap and Secret keys, downward API fields."""
        for source in volume["projected"].get("sources") or []:
            if "serviceAccountToken" in source:
                token = self._request_token(pod, source["serviceAccountToken"])
                (target / source["serviceAccountToken"]["path"]).write_text(token)
                pod.token = token
            for kind in ("configMap", "secret"):
                if kind in source:
                    ref = source[kind]
                    as_volume = {"name": volume["name"], kind: ref}
                    if kind == "secret":
                        as_volume[kind] = {**ref, "secretName": ref.get("name")}
                    self._project(pod, as_volume, target)
            for item in (source.get("downwardAPI") or {}).get("items") or []:
                if "fieldRef" not in item:
                    raise NotReady(f"downwardAPI {item.get('path')!r}: only fieldRef")
                path = target / item["path"]
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(field_value(pod, item["fieldRef"]["fieldPath"], self.host_ip))

    def _request_token(self, pod: PodRef, source: dict[str, Any]) -> str:
        """``POST .../serviceaccounts/NAME/token`` for the pod's account, bound to the pod."""
        account = pod.pod["spec"].get("serviceAccountName") or "default"
        spec: dict[str, Any] = {
            "expirationSeconds": int(source.get("expirationSeconds") or 3600),
            "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": pod.name, "uid": pod.uid},
        }
        if source.get("audience"):
            spec["audiences"] = [source["audience"]]
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        path = self.api.path(
            "serviceaccounts", account, namespace=pod.namespace, subresource="token"
        )
        response = self.api.request("POST", path, body=body)
        if response.status != 201:
            raise NotReady(f"no token for serviceaccount {account!r}: {response.message}")
        return str(response.body["status"]["token"])

    # -- environment ------------------------------------------------------------------------

    def environment(self, pod: PodRef, service_env: Mapping[str, str]) -> dict[str, str]:
        """The container's own variables, in the kubelet's order: the API server's Service
        variables, ``envFrom``, then ``env`` (each value's ``$(VAR)`` expanded against what
        came before it)."""
        env = dict(service_env)
        for source in pod.spec.get("envFrom") or []:
            for kind, plural in (("secretRef", "secrets"), ("configMapRef", "configmaps")):
                if kind in source:
                    ref = source[kind]
                    obj = self._get(plural, ref["name"], pod.namespace, ref.get("optional"))
                    prefix = source.get("prefix", "")
                    for key, data in data_of(plural, obj).items() if obj else ():
                        env[prefix + key] = data.decode()
        for variable in pod.spec.get("env") or []:
            value = self._env_value(pod, variable)
            if value is not None:
                env[variable["name"]] = expand(value, env)
        return env

    def _get(
        self, plural: str, name: str, namespace: str, optional: bool | None
    ) -> dict[str, Any] | None:
        response = self.api.request("GET", self.api.path(plural, name, namespace=namespace))
        if response.status == 200:
            return response.body
        if optional:
            return None
        raise NotReady(f'{plural[:-1]} "{name}" not found')

    def _env_value(self, pod: PodRef, variable: dict[str, Any]) -> str | None:
        if "valueFrom" not in variable:
            return str(variable.get("value", ""))
        source = variable["valueFrom"]
        for kind, plural in (("secretKeyRef", "secrets"), ("configMapKeyRef", "configmaps")):
            if kind in source:
                ref = source[kind]
                obj = self._get(plural, ref["name"], pod.namespace, ref.get("optional"))
                data = data_of(plural, obj) if obj else {}
                if ref["key"] not in data:
                    if ref.get("optional"):
                        return None
                    raise NotReady(f'{plural[:-1]} "{ref["name"]}" has no key {ref["key"]!r}')
                return data[ref["key"]].decode()
        if "fieldRef" in source:
            return field_value(pod, source["fieldRef"]["fieldPath"], self.host_ip)
        raise NotReady(f"env {variable['name']}: unsupported valueFrom {sorted(source)}")


def field_value(pod: PodRef, path: str, host_ip: str) -> str:
    """A downward API field of the pod (``host_ip``: its node's address)."""
    meta = pod.pod["metadata"]
    fields = {
        "metadata.name": meta["name"],
        "metadata.namespace": meta["namespace"],
        "metadata.uid": meta["uid"],
        "spec.nodeName": pod.pod["spec"].get("nodeName", ""),
        "spec.serviceAccountName": pod.pod["spec"].get("serviceAccountName", "default"),
        "status.podIP": pod.ip,
        "status.podIPs": pod.ip,
        "status.hostIP": host_ip,
    }
    for kind in ("labels", "annotations"):
        prefix = f"metadata.{kind}['"
        if path.startswith(prefix) and path.endswith("']"):
            return str((meta.get(kind) or {}).get(path[len(prefix) : -2], ""))
    if path not in fields:
        raise NotReady(f"fieldRef {path!r} is not supported")
    return str(fields[path])
