"""ServiceAccounts as a real cluster has them: what its controllers create in a new namespace, the
ServiceAccount admission plugin on pod create, and the TokenRequest API.

* A new namespace gets the ``default`` ServiceAccount (the serviceaccount controller) and the
  ``kube-root-ca.crt`` ConfigMap (the root-ca-cert-publisher) with the cluster CA in ``ca.crt``.
* Pod create, as ``plugin/pkg/admission/serviceaccount/admission.go``: ``spec.serviceAccountName``
  defaults to ``default``; a pod whose ServiceAccount does not exist is refused (403 Forbidden,
  ``error looking up service account NS/NAME: serviceaccount "NAME" not found``); unless
  ``automountServiceAccountToken: false`` on the pod or on its ServiceAccount, the projected
  volume ``kube-api-access-<5 random characters>`` (a bound token, ``ca.crt`` and the namespace)
  is added, and mounted read-only at ``/var/run/secrets/kubernetes.io/serviceaccount`` in every
  container and init container that has nothing mounted there yet.
* ``POST /api/v1/namespaces/NS/serviceaccounts/NAME/token`` (a TokenRequest): 201 with
  ``status.token`` and ``status.expirationTimestamp``; the token authenticates as
  ``system:serviceaccount:NS:NAME`` (see ``identity``); 404 for a ServiceAccount that does not
  exist, 400 for a duration under ten minutes.
"""

from __future__ import annotations

import copy
import datetime
import secrets
from typing import TYPE_CHECKING, Any

import aiohttp.web
import attrs
import kmock
from kmock import KubernetesError

if TYPE_CHECKING:
    from testcluster.apiserver.emulator import StateEmulator

TOKEN_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
DEFAULT_SERVICE_ACCOUNT = "default"
TOKEN_EXPIRATION = 3607  # the plugin's: an hour and 7 s, so that kubelets refresh at 80%
DEFAULT_TOKEN_SECONDS = 3600
MIN_TOKEN_SECONDS = 600
AUDIENCE = "https://kubernetes.default.svc.cluster.local"
# utilrand.String's alphabet: no vowels, no confusable characters.
_RANDOM_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
# The emulator serves plain HTTP for its Python clients: nothing verifies this certificate, it
# only has the shape of one (an HTTPS emulator's real CA replaces it, see root_ca).
PLACEHOLDER_CA = (
    "-----BEGIN CERTIFICATE-----\n"
    "MIIBdjCCARygAwIBAgIBADAKBggqhkjOPQQDAjAVMRMwEQYDVQQDEwprdWJlcm5ldGVz\n"
    "-----END CERTIFICATE-----\n"
)
PODS = kmock.resource("", "v1", "pods")
NAMESPACES = kmock.resource("", "v1", "namespaces")
SERVICE_ACCOUNTS = kmock.resource("", "v1", "serviceaccounts")
CONFIG_MAPS = kmock.resource("", "v1", "configmaps")


def random_suffix(length: int = 5) -> str:
    return "".join(secrets.choice(_RANDOM_ALPHABET) for _ in range(length))


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0)


def _stored(
    emulator: StateEmulator, resource: kmock.resource, namespace: str | None, name: str
) -> Any:
    key = (resource, namespace, name)
    objects = emulator._objects
    found = objects[key] if key in objects else None  # noqa: SIM401 - it has no get()
    return None if found is None or found.deleted else dict(found.raw)


async def admit(
    emulator: StateEmulator, request: kmock.Request
) -> aiohttp.web.StreamResponse | None:
    """The answer to a request this module handles whole, or None (after admitting a pod)."""
    if request.method != kmock.method.POST or request.resource is None:
        return None
    if request.resource == SERVICE_ACCOUNTS and request.subresource == "token":
        return token_request(emulator, request)
    if request.action != kmock.action.CREATE:
        return None
    if request.subresource is not None:
        return None
    if request.resource == PODS and isinstance(request.data, dict):
        namespace = request.namespace or (request.data.get("metadata") or {}).get("namespace")
        # Only in a namespace created through the API (which has its ServiceAccount): tests that
        # create pods without creating their namespace get no admission, as before.
        if namespace and _stored(emulator, NAMESPACES, None, str(namespace)) is not None:
            admit_pod(emulator, str(namespace), request.data)
        return None
    if request.resource == NAMESPACES:
        response = await emulator._create(request)
        if response.status == 201 and isinstance(request.data, dict):
            await populate_namespace(
                emulator, request, (request.data.get("metadata") or {})["name"]
            )
        return response
    return None


# -- namespaces -----------------------------------------------------------------------------


def root_ca(emulator: StateEmulator) -> str:
    return emulator.ca_pem or PLACEHOLDER_CA


async def populate_namespace(emulator: StateEmulator, request: kmock.Request, name: str) -> None:
    """What the controllers create in a new namespace: the ``default`` ServiceAccount and the
    ``kube-root-ca.crt`` ConfigMap."""
    children: tuple[tuple[kmock.resource, dict[str, Any]], ...] = (
        (
            SERVICE_ACCOUNTS,
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": DEFAULT_SERVICE_ACCOUNT},
            },
        ),
        (
            CONFIG_MAPS,
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": ROOT_CA_CONFIGMAP,
                    "annotations": {
                        "kubernetes.io/description": "Contains a CA bundle that can be used to "
                        "verify the kube-apiserver when using internal endpoints such as the "
                        "internal service IP or kubernetes.default.svc. No other usage is "
                        "guaranteed across distributions of Kubernetes clusters."
                    },
                },
                "data": {"ca.crt": root_ca(emulator)},
            },
        ),
    )
    for resource, body in children:
        if _stored(emulator, resource, name, body["metadata"]["name"]) is not None:
            continue
        child = attrs.evolve(
            request, resource=resource, namespace=name, name=None, subresource=None, data=body
        )
        await emulator._create(child)


# -- pods -----------------------------------------------------------------------------------


def token_volume(name: str) -> dict[str, Any]:
    """The projected volume the plugin adds, field for field."""
    return {
        "name": name,
        "projected": {
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": TOKEN_EXPIRATION, "path": "token"}},
                {
                    "configMap": {
                        "name": ROOT_CA_CONFIGMAP,
                        "items": [{"key": "ca.crt", "path": "ca.crt"}],
                    }
                },
                {
                    "downwardAPI": {
                        "items": [
                            {
                                "path": "namespace",
                                "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                            }
                        ]
                    }
                },
            ],
            "defaultMode": 420,
        },
    }


def admit_pod(emulator: StateEmulator, namespace: str, pod: dict[str, Any]) -> None:
    """Mutate ``pod`` as the ServiceAccount admission plugin does; 403 without its account."""
    spec = pod.setdefault("spec", {})
    # serviceAccount is the deprecated alias: the server keeps both in step.
    account = (
        spec.get("serviceAccountName") or spec.get("serviceAccount") or DEFAULT_SERVICE_ACCOUNT
    )
    spec["serviceAccountName"] = account
    spec["serviceAccount"] = account
    stored = _stored(emulator, SERVICE_ACCOUNTS, namespace, account)
    if stored is None:
        name = (pod.get("metadata") or {}).get("name") or ""
        raise KubernetesError(
            status=403,
            reason="Forbidden",
            message=f'pods "{name}" is forbidden: error looking up service account '
            f'{namespace}/{account}: serviceaccount "{account}" not found',
        )
    if spec.get("automountServiceAccountToken") is False:
        return
    if spec.get("automountServiceAccountToken") is None and (
        stored.get("automountServiceAccountToken") is False
    ):
        return
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    needing = [
        c
        for c in containers
        if not any(m.get("mountPath") == TOKEN_MOUNT_PATH for m in c.get("volumeMounts") or [])
    ]
    if not needing:
        return
    volumes = spec.setdefault("volumes", [])
    taken = {v.get("name") for v in volumes}
    name = f"kube-api-access-{random_suffix()}"
    while name in taken:
        name = f"kube-api-access-{random_suffix()}"
    volumes.append(token_volume(name))
    for container in needing:
        container.setdefault("volumeMounts", []).append(
            {"name": name, "readOnly": True, "mountPath": TOKEN_MOUNT_PATH}
        )


# -- TokenRequest ---------------------------------------------------------------------------


def token_request(emulator: StateEmulator, request: kmock.Request) -> aiohttp.web.StreamResponse:
    namespace, name = str(request.namespace), str(request.name)
    body = copy.deepcopy(request.data) if isinstance(request.data, dict) else {}
    account = _stored(emulator, SERVICE_ACCOUNTS, namespace, name)
    if account is None:
        raise KubernetesError(
            status=404, reason="NotFound", message=f'serviceaccounts "{name}" not found'
        )
    spec = dict(body.get("spec") or {})
    seconds = int(spec.get("expirationSeconds") or DEFAULT_TOKEN_SECONDS)
    if seconds < MIN_TOKEN_SECONDS:
        raise KubernetesError(
            status=400,
            reason="BadRequest",
            message="spec.expirationSeconds: Invalid value: "
            f"{seconds}: may not specify a duration less than 10 minutes",
        )
    bound = spec.get("boundObjectRef") or None
    pod = None
    if bound:
        kind, bound_name = bound.get("kind"), bound.get("name")
        plural = {"Pod": PODS, "Secret": kmock.resource("", "v1", "secrets")}.get(str(kind))
        if plural is None:
            raise KubernetesError(
                status=400,
                reason="BadRequest",
                message=f'cannot bind token for serviceaccount "{name}" to object of type '
                f"{bound.get('apiVersion')}, Kind={kind}",
            )
        target = _stored(emulator, plural, namespace, str(bound_name))
        if target is None:
            raise KubernetesError(
                status=404, reason="NotFound", message=f'{plural.plural} "{bound_name}" not found'
            )
        uid = (target.get("metadata") or {}).get("uid")
        if bound.get("uid") and bound.get("uid") != uid:
            raise KubernetesError(
                status=409,
                reason="Conflict",
                message=f"the UID in the bound object reference ({bound.get('uid')}) does not "
                f"match the UID in record. The object might have been deleted and then recreated",
            )
        if kind == "Pod":
            pod = str(bound_name)
    token = emulator.issue_token(namespace, name, pod=pod)
    expires = _now() + datetime.timedelta(seconds=seconds)
    answer = {
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": None},
        "spec": {
            "audiences": list(spec.get("audiences") or [AUDIENCE]),
            "expirationSeconds": seconds,
            "boundObjectRef": bound,
        },
        "status": {
            "token": token,
            "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
    }
    return aiohttp.web.json_response(answer, status=201)
