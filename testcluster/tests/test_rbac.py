"""RBAC and OwnerReferencesPermissionEnforcement in the API emulator, over HTTP: each rule runs a
request and checks the answer a real API server documents (status, reason and message)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from finishable.kube.api import KubeApi, KubeResponse
from testcluster.apiserver import rbac
from testcluster.apiserver.emulator import EmulatorServer
from testcluster.apiserver.identity import User, service_account_user

pytestmark = pytest.mark.quick

ADMIN_TOKEN = "rbac-admin"
NS = "rbac"
OTHER = "elsewhere"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
_names = itertools.count()


@pytest.fixture(scope="module")
def server() -> Iterator[EmulatorServer]:
    with EmulatorServer(
        required_token=ADMIN_TOKEN, authorize=True, owner_reference_enforcement=True
    ) as server:
        admin = KubeApi.for_url(server.url, token=ADMIN_TOKEN, namespace=NS)
        for namespace in (NS, OTHER):
            admin.request("POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
        admin.close()
        yield server


@pytest.fixture
def admin(server: EmulatorServer) -> Iterator[KubeApi]:
    api = KubeApi.for_url(server.url, token=ADMIN_TOKEN, namespace=NS)
    yield api
    api.close()


class Account:
    """A fresh service account of namespace NS, its API client and helpers to grant it rules."""

    def __init__(self, server: EmulatorServer, admin: KubeApi) -> None:
        assert server.emulator is not None
        self.name = f"sa{next(_names)}"
        self.user = f"system:serviceaccount:{NS}:{self.name}"
        self.admin = admin
        token = server.emulator.issue_token(NS, self.name)
        self.api = KubeApi.for_url(server.url, token=token, namespace=NS)
        self.subject = {"kind": "ServiceAccount", "name": self.name, "namespace": NS}

    def role(self, rules: list[dict[str, Any]], namespace: str = NS) -> str:
        name = f"{self.name}-role{next(_names)}"
        body = {"metadata": {"name": name}, "rules": rules}
        created = self.admin.request("POST", f"{RBAC}/namespaces/{namespace}/roles", body=body)
        assert created.status == 201, created.body
        return name

    def cluster_role(self, rules: list[dict[str, Any]]) -> str:
        name = f"{self.name}-clusterrole{next(_names)}"
        body = {"metadata": {"name": name}, "rules": rules}
        assert self.admin.request("POST", f"{RBAC}/clusterroles", body=body).status == 201
        return name

    def bind(self, kind: str, role: str, namespace: str | None = NS) -> None:
        """A RoleBinding in ``namespace``, or with None a ClusterRoleBinding."""
        body = {
            "metadata": {"name": f"{role}-binding{next(_names)}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
            "subjects": [self.subject],
        }
        path = (
            f"{RBAC}/namespaces/{namespace}/rolebindings"
            if namespace
            else f"{RBAC}/clusterrolebindings"
        )
        created = self.admin.request("POST", path, body=body)
        assert created.status == 201, created.body

    def grant(self, rules: list[dict[str, Any]], namespace: str = NS) -> None:
        self.bind("Role", self.role(rules, namespace), namespace)

    def groups(self) -> str:
        return f'["system:serviceaccounts" "system:serviceaccounts:{NS}" "system:authenticated"]'


@pytest.fixture
def account(server: EmulatorServer, admin: KubeApi) -> Iterator[Account]:
    account = Account(server, admin)
    yield account
    account.api.close()


def refused(response: KubeResponse, message: str) -> None:
    assert response.status == 403, response.body
    assert response.body["reason"] == "Forbidden"
    assert response.body["message"] == message


def rule(
    verbs: list[str], resources: list[str], groups: tuple[str, ...] = ("",), **more: Any
) -> dict[str, Any]:
    return {"verbs": verbs, "apiGroups": list(groups), "resources": resources, **more}


def configmap(name: str, **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, **meta}, "data": {"k": "v"}}


# -- the authorizer -------------------------------------------------------------------------------


def test_nothing_is_allowed_without_a_binding(account: Account) -> None:
    api, user = account.api, account.user
    refused(
        api.request("GET", api.path("configmaps")),
        f'configmaps is forbidden: User "{user}" cannot list resource "configmaps" in API group ""'
        f' in the namespace "{NS}"',
    )
    refused(
        api.request("GET", api.path("configmaps", "x")),
        f'configmaps "x" is forbidden: User "{user}" cannot get resource "configmaps" in API '
        f'group "" in the namespace "{NS}"',
    )
    refused(
        api.request("POST", api.path("configmaps"), body=configmap("x")),
        f'configmaps is forbidden: User "{user}" cannot create resource "configmaps" in API '
        f'group "" in the namespace "{NS}"',
    )
    refused(
        api.request("GET", "/api/v1/configmaps"),
        f'configmaps is forbidden: User "{user}" cannot list resource "configmaps" in API group ""'
        " at the cluster scope",
    )
    refused(
        api.request("GET", api.path("configmaps"), query={"watch": "true"}),
        f'configmaps is forbidden: User "{user}" cannot watch resource "configmaps" in API group'
        f' "" in the namespace "{NS}"',
    )
    response = api.request("GET", f"{RBAC}/clusterroles/x")
    refused(
        response,
        f'clusterroles.rbac.authorization.k8s.io "x" is forbidden: User "{user}" cannot get '
        'resource "clusterroles" in API group "rbac.authorization.k8s.io" at the cluster scope',
    )
    assert response.body["details"] == {
        "group": "rbac.authorization.k8s.io",
        "kind": "clusterroles",
        "name": "x",
    }


def test_the_admin_is_never_refused(admin: KubeApi) -> None:
    assert admin.request("GET", "/api/v1/secrets").status == 200
    assert admin.request("GET", "/metrics").status != 403


def test_a_role_grants_its_verbs_in_its_namespace_only(account: Account) -> None:
    api, user = account.api, account.user
    account.grant([rule(["get", "list", "create"], ["configmaps"])])
    assert api.request("POST", api.path("configmaps"), body=configmap("mine")).status == 201
    assert api.request("GET", api.path("configmaps", "mine")).status == 200
    assert api.request("GET", api.path("configmaps")).status == 200
    refused(
        api.request("DELETE", api.path("configmaps", "mine")),
        f'configmaps "mine" is forbidden: User "{user}" cannot delete resource "configmaps" in '
        f'API group "" in the namespace "{NS}"',
    )
    refused(
        api.request("PATCH", api.path("configmaps", "mine"), body={"data": {"k": "w"}}),
        f'configmaps "mine" is forbidden: User "{user}" cannot patch resource "configmaps" in '
        f'API group "" in the namespace "{NS}"',
    )
    refused(
        api.request("PUT", api.path("configmaps", "mine"), body=configmap("mine")),
        f'configmaps "mine" is forbidden: User "{user}" cannot update resource "configmaps" in '
        f'API group "" in the namespace "{NS}"',
    )
    refused(
        api.request("DELETE", api.path("configmaps")),
        f'configmaps is forbidden: User "{user}" cannot deletecollection resource "configmaps" '
        f'in API group "" in the namespace "{NS}"',
    )
    refused(
        api.request("GET", api.path("configmaps", namespace=OTHER)),
        f'configmaps is forbidden: User "{user}" cannot list resource "configmaps" in API group ""'
        f' in the namespace "{OTHER}"',
    )
    assert api.request("GET", api.path("secrets")).status == 403
    assert api.request("GET", "/api/v1/configmaps").status == 403  # not at the cluster scope


def test_a_cluster_role_bound_by_a_role_binding_grants_in_that_namespace(
    account: Account,
) -> None:
    api = account.api
    role = account.cluster_role([rule(["list"], ["configmaps"])])
    account.bind("ClusterRole", role, OTHER)
    assert api.request("GET", api.path("configmaps", namespace=OTHER)).status == 200
    assert api.request("GET", api.path("configmaps")).status == 403
    assert api.request("GET", "/api/v1/configmaps").status == 403
    account.bind("ClusterRole", role, None)  # a ClusterRoleBinding: everywhere
    assert api.request("GET", api.path("configmaps")).status == 200
    assert api.request("GET", "/api/v1/configmaps").status == 200


def test_a_service_account_subject_without_namespace_is_the_binding_namespace(
    account: Account, admin: KubeApi
) -> None:
    role = account.role([rule(["list"], ["configmaps"])])
    body = {
        "metadata": {"name": f"{role}-local"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account.name}],
    }
    assert admin.request("POST", f"{RBAC}/namespaces/{NS}/rolebindings", body=body).status == 201
    assert account.api.request("GET", account.api.path("configmaps")).status == 200


def test_user_and_group_subjects() -> None:
    user = service_account_user(NS, "sa")
    policy = rbac.Policy.of([])
    group_binding = {
        "roleRef": {"kind": "ClusterRole", "name": "reader"},
        "subjects": [{"kind": "Group", "name": f"system:serviceaccounts:{NS}"}],
    }
    policy.cluster_roles["reader"] = [rule(["get"], ["pods"])]
    policy.role_bindings[NS] = [group_binding]
    get_pod = rbac.Attributes(user, "get", "", "pods", name="p", namespace=NS)
    assert rbac.authorize(policy, get_pod) == (True, "")
    stranger = User("jane", ("system:authenticated",))
    assert not rbac.authorize(policy, rbac.Attributes(**{**get_pod.__dict__, "user": stranger}))[0]
    policy.role_bindings[NS] = [{**group_binding, "subjects": [{"kind": "User", "name": "jane"}]}]
    assert rbac.authorize(policy, rbac.Attributes(**{**get_pod.__dict__, "user": stranger}))[0]


def test_resource_names_restrict_to_those_objects(account: Account, admin: KubeApi) -> None:
    api, user = account.api, account.user
    for name in ("named", "unnamed"):
        admin.request("POST", admin.path("configmaps"), body=configmap(name))
    account.grant([rule(["get", "list", "delete"], ["configmaps"], resourceNames=["named"])])
    assert api.request("GET", api.path("configmaps", "named")).status == 200
    refused(
        api.request("GET", api.path("configmaps", "unnamed")),
        f'configmaps "unnamed" is forbidden: User "{user}" cannot get resource "configmaps" in '
        f'API group "" in the namespace "{NS}"',
    )
    # A list names no object: resourceNames never grant it.
    assert api.request("GET", api.path("configmaps")).status == 403
    assert api.request("DELETE", api.path("configmaps", "named")).status == 200


def test_subresources_are_granted_as_resource_slash_subresource(account: Account) -> None:
    api, user = account.api, account.user
    account.grant([rule(["get", "patch"], ["pods"])])
    status = {"status": {"phase": "Running"}}
    refused(
        api.request("PATCH", api.path("pods", "p", subresource="status"), body=status),
        f'pods "p" is forbidden: User "{user}" cannot patch resource "pods/status" in API group'
        f' "" in the namespace "{NS}"',
    )
    account.grant([rule(["patch"], ["pods/status"])])
    assert (
        api.request("PATCH", api.path("pods", "p", subresource="status"), body=status).status == 404
    )
    refused(
        api.request("GET", api.path("pods", "p", subresource="log")),
        f'pods "p" is forbidden: User "{user}" cannot get resource "pods/log" in API group ""'
        f' in the namespace "{NS}"',
    )
    account.grant([rule(["get"], ["*/log"])])
    assert api.request("GET", api.path("pods", "p", subresource="log")).status != 403


def test_wildcards(account: Account) -> None:
    api = account.api
    assert api.request("GET", f"/apis/apps/v1/namespaces/{NS}/statefulsets").status == 403
    account.grant([rule(["*"], ["statefulsets"], ("apps",))])
    assert api.request("GET", f"/apis/apps/v1/namespaces/{NS}/statefulsets").status == 200
    assert api.request("DELETE", f"/apis/apps/v1/namespaces/{NS}/statefulsets/s").status == 404
    assert api.request("GET", api.path("services")).status == 403
    account.grant([rule(["list"], ["*"])])
    assert api.request("GET", api.path("services")).status == 200
    assert api.request("GET", f"/apis/apps/v1/namespaces/{NS}/deployments").status == 403
    account.grant([rule(["list"], ["deployments"], ("*",))])
    assert api.request("GET", f"/apis/apps/v1/namespaces/{NS}/deployments").status == 200
    assert api.request("GET", api.path("pods", "p", subresource="status")).status == 403


def test_non_resource_urls(account: Account) -> None:
    api, user = account.api, account.user
    # system:discovery and system:public-info-viewer: every authenticated user
    for path in ("/api", "/apis", "/apis/apps/v1", "/version"):
        assert api.request("GET", path).status != 403, path
    refused(api.request("GET", "/metrics"), f'forbidden: User "{user}" cannot get path "/metrics"')
    role = account.cluster_role([{"verbs": ["get"], "nonResourceURLs": ["/metrics", "/logs/*"]}])
    account.bind("ClusterRole", role, None)
    assert api.request("GET", "/metrics").status != 403
    assert api.request("GET", "/logs/kube-apiserver.log").status != 403
    refused(api.request("GET", "/logsx"), f'forbidden: User "{user}" cannot get path "/logsx"')


def test_a_binding_to_a_missing_role_gives_the_resolution_error(account: Account) -> None:
    account.bind("Role", "ghost")
    api, user = account.api, account.user
    refused(
        api.request("GET", api.path("configmaps")),
        f'configmaps is forbidden: User "{user}" cannot list resource "configmaps" in API group ""'
        f' in the namespace "{NS}": RBAC: role.rbac.authorization.k8s.io "ghost" not found',
    )


def test_a_namespace_is_its_own_namespace(account: Account) -> None:
    api = account.api
    assert api.request("GET", f"/api/v1/namespaces/{NS}").status == 403
    account.grant([rule(["get"], ["namespaces"])])
    assert api.request("GET", f"/api/v1/namespaces/{NS}").status == 200
    assert api.request("GET", f"/api/v1/namespaces/{OTHER}").status == 403


# -- escalation -----------------------------------------------------------------------------------


def test_a_role_granting_what_its_creator_lacks_is_refused(account: Account) -> None:
    api = account.api
    account.grant([rule(["create", "update"], ["roles"], ("rbac.authorization.k8s.io",))])
    body = {
        "metadata": {"name": "wanted"},
        "rules": [rule(["get", "list"], ["configmaps"]), rule(["get"], ["pods"])],
    }
    refused(
        api.request("POST", f"{RBAC}/namespaces/{NS}/roles", body=body),
        'roles.rbac.authorization.k8s.io "wanted" is forbidden: user '
        f'"{account.user}" (groups={account.groups()}) is attempting to grant RBAC permissions '
        'not currently held:\n{APIGroups:[""], Resources:["configmaps"], Verbs:["get" "list"]}\n'
        '{APIGroups:[""], Resources:["pods"], Verbs:["get"]}',
    )
    account.grant([rule(["get", "list"], ["configmaps"])])
    refused(
        api.request("POST", f"{RBAC}/namespaces/{NS}/roles", body=body),
        'roles.rbac.authorization.k8s.io "wanted" is forbidden: user '
        f'"{account.user}" (groups={account.groups()}) is attempting to grant RBAC permissions '
        'not currently held:\n{APIGroups:[""], Resources:["pods"], Verbs:["get"]}',
    )
    account.grant([rule(["*"], ["pods"])])
    assert api.request("POST", f"{RBAC}/namespaces/{NS}/roles", body=body).status == 201
    # Held in NS only: the same Role elsewhere is refused (and so is creating it there).
    assert api.request("POST", f"{RBAC}/namespaces/{OTHER}/roles", body=body).status == 403
    # An update is checked as a create is.
    more = {**body, "rules": [*body["rules"], rule(["get"], ["secrets"])]}
    refused(
        api.request("PUT", f"{RBAC}/namespaces/{NS}/roles/wanted", body=more),
        'roles.rbac.authorization.k8s.io "wanted" is forbidden: user '
        f'"{account.user}" (groups={account.groups()}) is attempting to grant RBAC permissions '
        'not currently held:\n{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}',
    )


def test_escalate_allows_granting_anything(account: Account) -> None:
    api = account.api
    account.grant([rule(["create", "escalate"], ["roles"], ("rbac.authorization.k8s.io",))])
    body = {"metadata": {"name": "anything"}, "rules": [rule(["*"], ["*"], ("*",))]}
    assert api.request("POST", f"{RBAC}/namespaces/{NS}/roles", body=body).status == 201


def test_subresource_and_resource_name_coverage() -> None:
    owner = [rule(["get"], ["*/status"]), rule(["get"], ["secrets"], resourceNames=["a", "b"])]
    assert rbac.covers(owner, [rule(["get"], ["pods/status", "jobs/status"])])[0]
    assert rbac.covers(owner, [rule(["get"], ["secrets"], resourceNames=["a"])])[0]
    ok, missing = rbac.covers(owner, [rule(["get"], ["secrets"])])
    assert not ok
    assert [rbac.compact_string(m) for m in missing] == [
        '{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}'
    ]
    urls = [{"verbs": ["get"], "nonResourceURLs": ["/metrics*"]}]
    assert rbac.covers(urls, [{"verbs": ["get"], "nonResourceURLs": ["/metrics/x"]}])[0]
    assert not rbac.covers(urls, [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}])[0]


def test_a_cluster_role_aggregation_needs_cluster_admin(account: Account) -> None:
    account.grant([rule(["create"], ["clusterroles"], ("rbac.authorization.k8s.io",))])
    role = account.cluster_role(
        [rule(["create"], ["clusterroles"], ("rbac.authorization.k8s.io",))]
    )
    account.bind("ClusterRole", role, None)
    body = {
        "metadata": {"name": f"{account.name}-aggregated"},
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"a": "b"}}]},
        "rules": [],
    }
    refused(
        account.api.request("POST", f"{RBAC}/clusterroles", body=body),
        f'clusterroles.rbac.authorization.k8s.io "{account.name}-aggregated" is forbidden: '
        "must have cluster-admin privileges to use the aggregationRule",
    )


def test_a_binding_needs_the_role_permissions_or_bind(account: Account) -> None:
    api = account.api
    account.grant([rule(["create"], ["rolebindings"], ("rbac.authorization.k8s.io",))])
    secrets_role = account.role([rule(["get"], ["secrets"])])

    def binding(role: str, kind: str = "Role") -> dict[str, Any]:
        return {
            "metadata": {"name": f"{role}-b{next(_names)}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
            "subjects": [{"kind": "User", "name": "someone"}],
        }

    body = binding(secrets_role)
    refused(
        api.request("POST", f"{RBAC}/namespaces/{NS}/rolebindings", body=body),
        f'rolebindings.rbac.authorization.k8s.io "{body["metadata"]["name"]}" is forbidden: user '
        f'"{account.user}" (groups={account.groups()}) is attempting to grant RBAC permissions '
        'not currently held:\n{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}',
    )
    missing = api.request("POST", f"{RBAC}/namespaces/{NS}/rolebindings", body=binding("nope"))
    assert missing.status == 404
    assert missing.body["message"] == 'roles.rbac.authorization.k8s.io "nope" not found'
    account.grant(
        [rule(["bind"], ["roles"], ("rbac.authorization.k8s.io",), resourceNames=[secrets_role])]
    )
    assert (
        api.request(
            "POST", f"{RBAC}/namespaces/{NS}/rolebindings", body=binding(secrets_role)
        ).status
        == 201
    )
    # Holding the permissions is enough too.
    configmaps_role = account.role([rule(["get"], ["configmaps"])])
    account.grant([rule(["get"], ["configmaps"])])
    assert (
        api.request(
            "POST", f"{RBAC}/namespaces/{NS}/rolebindings", body=binding(configmaps_role)
        ).status
        == 201
    )


# -- OwnerReferencesPermissionEnforcement ---------------------------------------------------------


def owner_ref(owner: dict[str, Any], kind: str = "ConfigMap", **more: Any) -> dict[str, Any]:
    meta = owner["metadata"]
    return {"apiVersion": "v1", "kind": kind, "name": meta["name"], "uid": meta["uid"], **more}


def test_block_owner_deletion_needs_update_on_the_owner_finalizers(
    account: Account, admin: KubeApi
) -> None:
    api = account.api
    parent = admin.request("POST", admin.path("configmaps"), body=configmap(f"{account.name}-p"))
    account.grant([rule(["create"], ["configmaps"])])
    blocking = owner_ref(parent.body, blockOwnerDeletion=True, controller=True)
    child = configmap("child-" + account.name, ownerReferences=[blocking])
    refused(
        api.request("POST", api.path("configmaps"), body=child),
        f'configmaps "child-{account.name}" is forbidden: cannot set blockOwnerDeletion if an '
        "ownerReference refers to a resource you can't set finalizers on: , <nil>",
    )
    # Not blocking: no check (and a create needs no delete).
    plain = configmap("plain-" + account.name, ownerReferences=[owner_ref(parent.body)])
    assert api.request("POST", api.path("configmaps"), body=plain).status == 201
    # update on configmaps/finalizers, of that owner only
    account.grant(
        [
            rule(
                ["update"],
                ["configmaps/finalizers"],
                resourceNames=[parent.body["metadata"]["name"]],
            )
        ]
    )
    assert api.request("POST", api.path("configmaps"), body=child).status == 201


def test_generate_name_and_unknown_kinds_in_the_refusal(account: Account) -> None:
    api = account.api
    account.grant([rule(["create"], ["configmaps"])])
    ref: dict[str, Any] = {
        "apiVersion": "example.com/v1",
        "kind": "Nothing",
        "name": "n",
        "uid": "u",
    }
    ref["blockOwnerDeletion"] = True
    body = {"metadata": {"generateName": "gen-", "ownerReferences": [ref]}}
    response = api.request("POST", api.path("configmaps"), body=body)
    assert response.status == 403
    assert response.body["message"].startswith('configmaps "gen-')
    assert response.body["message"].endswith(
        "cannot set blockOwnerDeletion in this case because cannot find RESTMapping for "
        'APIVersion example.com/v1 Kind Nothing: no matches for kind "Nothing" in version '
        '"example.com/v1"'
    )


def test_changing_owner_references_needs_delete_on_the_object(
    account: Account, admin: KubeApi
) -> None:
    api = account.api
    name = f"{account.name}-c"
    parent = admin.request("POST", admin.path("configmaps"), body=configmap(f"{account.name}-p"))
    admin.request("POST", admin.path("configmaps"), body=configmap(name))
    account.grant([rule(["get", "patch", "update"], ["configmaps"])])
    assert (
        api.request("PATCH", api.path("configmaps", name), body={"data": {"k": "2"}}).status == 200
    )
    adopt = {"metadata": {"ownerReferences": [owner_ref(parent.body)]}}
    refused(
        api.request("PATCH", api.path("configmaps", name), body=adopt),
        f'configmaps "{name}" is forbidden: cannot set an ownerRef on a resource you can\'t '
        "delete: , <nil>",
    )
    account.grant([rule(["delete"], ["configmaps"])])
    assert api.request("PATCH", api.path("configmaps", name), body=adopt).status == 200
    # Newly blocking on an update: the owner's finalizers again.
    block = {"metadata": {"ownerReferences": [owner_ref(parent.body, blockOwnerDeletion=True)]}}
    refused(
        api.request("PATCH", api.path("configmaps", name), body=block),
        f'configmaps "{name}" is forbidden: cannot set blockOwnerDeletion if an ownerReference '
        "refers to a resource you can't set finalizers on: , <nil>",
    )
    account.grant([rule(["update"], ["configmaps/finalizers"])])
    assert api.request("PATCH", api.path("configmaps", name), body=block).status == 200
    # Already blocking, unchanged references: no check at all.
    assert (
        api.request("PATCH", api.path("configmaps", name), body={"data": {"k": "3"}}).status == 200
    )


def test_owner_finalizers_of_a_custom_resource_use_its_plural() -> None:
    user = service_account_user(NS, "op")
    policy = rbac.Policy.of([])
    mapper = {("finishable.dev", "v1", "FinishableSparkJob"): [("finishablesparkjobs", True)]}
    ref = {
        "apiVersion": "finishable.dev/v1",
        "kind": "FinishableSparkJob",
        "name": "job",
        "uid": "1",
        "blockOwnerDeletion": True,
    }
    pod = {"metadata": {"name": "driver", "ownerReferences": [ref]}}
    create = rbac.Attributes(user, "create", "", "pods", namespace=NS)
    error = rbac.owner_reference_admission(policy, user, create, pod, None, mapper, "driver")
    assert error is not None and error.status == 403
    policy.roles[(NS, "r")] = [
        rule(["update"], ["finishablesparkjobs/finalizers"], ("finishable.dev",))
    ]
    policy.role_bindings[NS] = [
        {
            "roleRef": {"kind": "Role", "name": "r"},
            "subjects": [{"kind": "ServiceAccount", "name": "op", "namespace": NS}],
        }
    ]
    assert rbac.owner_reference_admission(policy, user, create, pod, None, mapper) is None
