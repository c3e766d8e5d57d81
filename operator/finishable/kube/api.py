"""A small synchronous JSON client for the Kubernetes API, for the operator, drivers and stores.

Why this shape: the ``kubernetes`` package already knows how to find and authenticate to a
cluster (in-cluster service account with token rotation, kubeconfig with exec plugins, OIDC,
client certificates, CA data), and those loaders have a stable API across its versions. Its
generated ``CoreV1Api`` does not: its method signatures, model validation and error handling
changed between releases we allow (>=30,<37.0.2), and it converts every response into models we
would only turn back into bytes. So we take the loaded ``Configuration`` (host, TLS, auth headers
through ``auth_settings()``, which calls the token refresh hook) and speak plain JSON over
``urllib3``, which ``kubernetes`` depends on. It is synchronous because the driver runtime is
threads, and ``urllib3.PoolManager`` is thread-safe.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote, urlencode

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from finishable.state.errors import BackendError

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
_RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})

# The config loaders are stable across client versions but untyped; give them types once.
_load_incluster_config: Callable[..., None] = k8s_config.load_incluster_config
_load_kube_config: Callable[..., None] = k8s_config.load_kube_config
_list_kube_config_contexts: Callable[..., tuple[list[dict[str, Any]], dict[str, Any]]] = (
    k8s_config.list_kube_config_contexts
)


@dataclass(frozen=True, slots=True)
class KubeResponse:
    """Status code and decoded JSON body (a ``Status`` object for errors)."""

    status: int
    body: dict[str, Any]

    @property
    def message(self) -> str:
        return str(self.body.get("message") or self.body.get("reason") or self.status)


class KubeApiError(BackendError):
    """The API server answered with an unexpected status."""

    def __init__(self, what: str, response: KubeResponse) -> None:
        super().__init__(f"{what}: HTTP {response.status}: {response.message}")
        self.status = response.status
        self.response = response


class KubeApi:
    """JSON requests against one API server, with bounded retries on transient failures."""

    def __init__(
        self,
        configuration: k8s_client.Configuration,
        *,
        namespace: str = "default",
        timeout: float = 10.0,
        retries: int = 3,
        pool_size: int = 8,
        user_agent: str = "finishable-state",
    ) -> None:
        self.configuration = configuration
        self.namespace = namespace
        self.timeout = timeout
        self.retries = retries
        self.user_agent = user_agent
        self._host = str(configuration.host).rstrip("/")
        self._auth_lock = threading.Lock()
        pool_args: dict[str, Any] = {
            "maxsize": pool_size,
            "retries": False,
            "cert_reqs": ssl.CERT_REQUIRED if configuration.verify_ssl else ssl.CERT_NONE,
        }
        if configuration.ssl_ca_cert:
            pool_args["ca_certs"] = configuration.ssl_ca_cert
        if configuration.cert_file:
            pool_args["cert_file"] = configuration.cert_file
        if configuration.key_file:
            pool_args["key_file"] = configuration.key_file
        if getattr(configuration, "tls_server_name", None):
            pool_args["server_hostname"] = configuration.tls_server_name
        if configuration.assert_hostname is not None:
            pool_args["assert_hostname"] = configuration.assert_hostname
        self._pool: urllib3.PoolManager
        if configuration.proxy:
            self._pool = urllib3.ProxyManager(configuration.proxy, **pool_args)
        else:
            self._pool = urllib3.PoolManager(**pool_args)

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_environment(cls, *, namespace: str | None = None, **kwargs: Any) -> KubeApi:
        """As client-go (kubectl) chooses: the kubeconfig ``$KUBECONFIG`` names; else, in a pod,
        the service account; else the default kubeconfig."""
        if os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
            return cls.in_cluster(namespace=namespace, **kwargs)
        return cls.from_kubeconfig(namespace=namespace, **kwargs)

    @classmethod
    def in_cluster(cls, *, namespace: str | None = None, **kwargs: Any) -> KubeApi:
        configuration = k8s_client.Configuration()
        try:
            _load_incluster_config(client_configuration=configuration)
        except k8s_config.ConfigException as exc:
            raise BackendError(f"cannot load the in-cluster Kubernetes config: {exc}") from exc
        if namespace is None:
            namespace = os.environ.get("POD_NAMESPACE") or _read_text(SERVICE_ACCOUNT_NAMESPACE)
        return cls(configuration, namespace=namespace or "default", **kwargs)

    @classmethod
    def from_kubeconfig(
        cls,
        path: str | os.PathLike[str] | None = None,
        *,
        context: str | None = None,
        namespace: str | None = None,
        **kwargs: Any,
    ) -> KubeApi:
        configuration = k8s_client.Configuration()
        # Read $KUBECONFIG now: the client reads it once, at import time.
        config_file = os.fspath(path) if path is not None else os.environ.get("KUBECONFIG")
        try:
            _load_kube_config(
                config_file=config_file,
                context=context,
                client_configuration=configuration,
                persist_config=False,
            )
            if namespace is None:
                contexts, active = _list_kube_config_contexts(config_file)
                chosen = next((c for c in contexts if c.get("name") == context), active)
                namespace = (chosen or {}).get("context", {}).get("namespace")
        except (k8s_config.ConfigException, OSError) as exc:
            raise BackendError(f"cannot load the kubeconfig: {exc}") from exc
        return cls(configuration, namespace=namespace or "default", **kwargs)

    @classmethod
    def for_url(
        cls, url: str, *, token: str | None = None, namespace: str = "default", **kwargs: Any
    ) -> KubeApi:
        """Plain address (``kubectl proxy``, an API emulator in tests), optional bearer token."""
        configuration = k8s_client.Configuration(host=url)
        if token:
            # "authorization" is the key every client version reads (newer ones as an alias).
            configuration.api_key["authorization"] = token
            configuration.api_key_prefix["authorization"] = "Bearer"
        return cls(configuration, namespace=namespace, **kwargs)

    # -- requests -----------------------------------------------------------------------------

    def _headers(
        self, has_body: bool, accept: str | None, content_type: str | None = None
    ) -> dict[str, str]:
        headers = {"Accept": accept or "application/json", "User-Agent": self.user_agent}
        if has_body:
            headers["Content-Type"] = content_type or "application/json"
        headers.update(self.auth_headers())
        return headers

    def auth_headers(self) -> dict[str, str]:
        """The credentials as headers, refreshed if the loader's token expired."""
        with self._auth_lock:  # the refresh hook rewrites the configuration in place
            settings = cast(Mapping[str, Mapping[str, Any]], self.configuration.auth_settings())
        return {
            str(setting["key"]): str(setting["value"])
            for setting in settings.values()
            if setting.get("in") == "header" and setting.get("value")
        }

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | list[Any] | None = None,
        accept: str | None = None,
        content_type: str | None = None,
    ) -> KubeResponse:
        """Send one request; retry connection errors, 429 and 5xx; return any other status.

        ``content_type`` names the patch flavour of a PATCH (``application/merge-patch+json``,
        or ``application/json-patch+json`` with a list of operations as ``body``).
        """
        url = self._host + path + (f"?{urlencode(query)}" if query else "")
        payload = json.dumps(body, separators=(",", ":")).encode() if body is not None else None
        delay = 0.1
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            try:
                raw = self._pool.request(
                    method,
                    url,
                    body=payload,
                    headers=self._headers(payload is not None, accept, content_type),
                    timeout=urllib3.Timeout(total=self.timeout),
                    retries=False,
                )
            except urllib3.exceptions.HTTPError as exc:
                if last:
                    raise BackendError(f"{method} {url}: {exc}") from exc
                log.debug("%s %s failed (%s), retrying in %.2fs", method, path, exc, delay)
            else:
                response = KubeResponse(raw.status, _decode(raw.data))
                if raw.status not in _RETRY_STATUSES or last:
                    return response
                retry_after = raw.headers.get("Retry-After")
                if retry_after and retry_after.isdigit():
                    delay = min(float(retry_after), 2.0)
                log.debug("%s %s got %s, retrying in %.2fs", method, path, raw.status, delay)
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
        raise AssertionError("unreachable")  # pragma: no cover

    def path(
        self,
        plural: str,
        name: str | None = None,
        *,
        namespace: str | None = None,
        api_version: str = "v1",
        subresource: str | None = None,
    ) -> str:
        """The URL path of a namespaced collection or object (core/v1 unless ``api_version``)."""
        ns = quote(namespace or self.namespace, safe="")
        root = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        base = f"{root}/namespaces/{ns}/{plural}"
        if not name:
            return base
        path = f"{base}/{quote(name, safe='')}"
        return f"{path}/{subresource}" if subresource else path

    def close(self) -> None:
        self._pool.clear()

    def __repr__(self) -> str:
        return f"KubeApi({self._host!r}, namespace={self.namespace!r})"


def _decode(data: bytes) -> dict[str, Any]:
    if not data:
        return {}
    try:
        decoded = json.loads(data)
    except ValueError:
        return {"message": data[:200].decode("utf-8", "replace")}
    return decoded if isinstance(decoded, dict) else {"items": decoded}


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None
