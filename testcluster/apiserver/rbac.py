"""RBAC for the API emulator, as a real API server with ``--authorization-mode=RBAC`` and the
``OwnerReferencesPermissionEnforcement`` admission plugin does it.

Pure functions over the stored RBAC objects (a ``Policy`` snapshot), following Kubernetes:

* the authorizer (``plugin/pkg/auth/authorizer/rbac/rbac.go``): ClusterRoleBindings, then the
  RoleBindings of the request's namespace; verbs, apiGroups, resources (``resource/subresource``
  and ``*/subresource``), resourceNames, nonResourceURLs (``prefix*``) and ``*``; members of
  ``system:masters`` are never refused; the bootstrap ``system:discovery``,
  ``system:public-info-viewer`` and ``system:basic-user`` grants for ``system:authenticated``;
  a refusal is the real 403 (``responsewriters.forbiddenMessage``);
* escalation prevention (``pkg/registry/rbac/validation/rule.go`` ``ConfirmNoEscalation`` and the
  ``policybased`` storages): a Role or ClusterRole may be written only by someone who holds what
  it grants (or has ``escalate`` on it), a RoleBinding or ClusterRoleBinding only by someone who
  holds what its role grants (or has ``bind`` on the role);
* ``OwnerReferencesPermissionEnforcement`` (``plugin/pkg/admission/gc/gc_admission.go``):
  changing an object's ownerReferences needs ``delete`` on the object (not on create), and each
  new or newly blocking ``blockOwnerDeletion: true`` reference needs ``update`` on the owner's
  ``<resource>/finalizers``.

The emulator calls ``authorize_request`` for every request and ``admit`` for every create and
update; both read the stored objects of the emulator they are given.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from kmock import KubernetesError

from testcluster.apiserver.identity import AUTHENTICATED, User, admin

if TYPE_CHECKING:
    import kmock

    from testcluster.apiserver.emulator import StateEmulator

RBAC_GROUP = "rbac.authorization.k8s.io"
ALL = "*"
Rule = Mapping[str, Any]

# The caller of the request being served (set by authorize_request; admission reads it).
CALLER: contextvars.ContextVar[User | None] = contextvars.ContextVar("caller", default=None)

# The default ClusterRoles every authenticated user is bound to (the apiserver's bootstrap policy,
# plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go), kept here rather than stored.
BOOTSTRAP_CLUSTER_ROLES: dict[str, list[dict[str, Any]]] = {
    "system:discovery": [
        {
            "verbs": ["get"],
            "nonResourceURLs": [
                "/api",
                "/api/*",
                "/apis",
                "/apis/*",
                "/healthz",
                "/livez",
                "/openapi",
                "/openapi/*",
                "/readyz",
                "/version",
                "/version/",
            ],
        }
    ],
    "system:public-info-viewer": [
        {
            "verbs": ["get"],
            "nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"],
        }
    ],
    "system:basic-user": [
        {
            "verbs": ["create"],
            "apiGroups": ["authorization.k8s.io"],
            "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
        },
        {
            "verbs": ["create"],
            "apiGroups": ["authentication.k8s.io"],
            "resources": ["selfsubjectreviews"],
        },
    ],
}
BOOTSTRAP_CLUSTER_ROLE_BINDINGS: list[dict[str, Any]] = [
    {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": RBAC_GROUP, "kind": "Group", "name": AUTHENTICATED}],
    }
    for name in BOOTSTRAP_CLUSTER_ROLES
]
# What the aggregationRule of a ClusterRole needs (it can gather anything).
FULL_AUTHORITY: list[dict[str, Any]] = [
    {"verbs": [ALL], "apiGroups": [ALL], "resources": [ALL]},
    {"verbs": [ALL], "nonResourceURLs": [ALL]},
]


# -- the request ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Attributes:
    """What the authorizer is asked (authorizer.AttributesRecord)."""

    user: User
    verb: str
    group: str = ""
    resource: str = ""  # the plural, without the subresource
    subresource: str = ""
    name: str = ""
    namespace: str = ""
    path: str = ""
    resource_request: bool = True


@dataclass
class Policy:
    """The RBAC objects in store (plus the bootstrap ones), as the rule resolver reads them."""

    roles: dict[tuple[str, str], list[Rule]] = field(default_factory=dict)
    cluster_roles: dict[str, list[Rule]] = field(default_factory=dict)
    role_bindings: dict[str, list[Mapping[str, Any]]] = field(default_factory=dict)
    cluster_role_bindings: list[Mapping[str, Any]] = field(default_factory=list)

    @classmethod
    def of(cls, objects: Iterable[tuple[str | None, str | None, Mapping[str, Any]]]) -> Policy:
        """From ``(plural, namespace, object)`` of the rbac.authorization.k8s.io objects."""
        policy = cls(
            cluster_roles={name: list(rules) for name, rules in BOOTSTRAP_CLUSTER_ROLES.items()},
            cluster_role_bindings=list(BOOTSTRAP_CLUSTER_ROLE_BINDINGS),
        )
        for plural, namespace, obj in objects:
            name = str((obj.get("metadata") or {}).get("name") or "")
            if plural == "roles":
                policy.roles[(namespace or "", name)] = list(obj.get("rules") or [])
            elif plural == "clusterroles":
                policy.cluster_roles[name] = list(obj.get("rules") or [])
            elif plural == "rolebindings":
                policy.role_bindings.setdefault(namespace or "", []).append(obj)
            elif plural == "clusterrolebindings":
                policy.cluster_role_bindings.append(obj)
        return policy

    def role_reference_rules(
        self, role_ref: Mapping[str, Any], namespace: str
    ) -> tuple[list[Rule] | None, str]:
        """The rules a roleRef names, or None and the lister's not-found message."""
        kind, name = role_ref.get("kind"), str(role_ref.get("name") or "")
        if kind == "Role":
            rules = self.roles.get((namespace, name))
            return rules, f'role.{RBAC_GROUP} "{name}" not found'
        if kind == "ClusterRole":
            rules = self.cluster_roles.get(name)
            return rules, f'clusterrole.{RBAC_GROUP} "{name}" not found'
        return None, f"unsupported role reference kind: {kind!r}"

    def rules_for(self, user: User, namespace: str) -> tuple[list[Rule], list[str]]:
        """Every rule that applies to ``user`` in ``namespace`` ("" for the cluster scope), and
        the resolution errors (bindings to roles that do not exist)."""
        rules: list[Rule] = []
        errors: list[str] = []
        bindings = [(b, "") for b in self.cluster_role_bindings]
        if namespace:
            bindings += [(b, namespace) for b in self.role_bindings.get(namespace, [])]
        for binding, binding_namespace in bindings:
            if not any(
                applies_to(user, subject, binding_namespace)
                for subject in binding.get("subjects") or []
            ):
                continue
            found, error = self.role_reference_rules(binding.get("roleRef") or {}, namespace)
            if found is None:
                errors.append(error)
            else:
                rules.extend(found)
        return rules, errors


def applies_to(user: User, subject: Mapping[str, Any], namespace: str) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return bool(user.name == name)
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        account_namespace = subject.get("namespace") or namespace
        if not account_namespace:
            return False
        return bool(user.name == f"system:serviceaccount:{account_namespace}:{name}")
    return False


def request_attributes(user: User, request: kmock.Request) -> Attributes:
    """The attributes of an API request (the apiserver's RequestInfo)."""
    from testcluster.apiserver.emulator import api_call  # a cycle at the top

    call = api_call("", request)
    if not call.resource:
        return Attributes(user, call.verb, path=call.path, resource_request=False)
    resource, _, subresource = call.resource.partition("/")
    name = request.name or ""
    namespace = request.namespace or ""
    if call.group == "" and resource == "namespaces" and name:
        namespace = name  # the apiserver reads /api/v1/namespaces/NAME as that namespace
    return Attributes(user, call.verb, call.group, resource, subresource, name, namespace)


# -- the authorizer -------------------------------------------------------------------------------


def rule_allows(attributes: Attributes, rule: Rule) -> bool:
    verbs = rule.get("verbs") or []
    if ALL not in verbs and attributes.verb not in verbs:
        return False
    if not attributes.resource_request:
        return any(
            url in (ALL, attributes.path)
            or (url.endswith("*") and attributes.path.startswith(url.rstrip("*")))
            for url in rule.get("nonResourceURLs") or []
        )
    groups = rule.get("apiGroups") or []
    if ALL not in groups and attributes.group not in groups:
        return False
    combined = attributes.resource
    if attributes.subresource:
        combined = f"{attributes.resource}/{attributes.subresource}"
    if not any(
        resource in (ALL, combined)
        or (attributes.subresource and resource == f"*/{attributes.subresource}")
        for resource in rule.get("resources") or []
    ):
        return False
    names = rule.get("resourceNames") or []
    return not names or attributes.name in names


def authorize(policy: Policy, attributes: Attributes) -> tuple[bool, str]:
    """Whether RBAC allows the request, and the reason it gives when it does not."""
    if attributes.user.is_admin:
        return True, ""
    rules, errors = policy.rules_for(attributes.user, attributes.namespace)
    if any(rule_allows(attributes, rule) for rule in rules):
        return True, ""
    if not errors:
        return False, ""
    return False, f"RBAC: {aggregate(errors)}"


def aggregate(errors: Sequence[str]) -> str:
    """utilerrors.NewAggregate(...).Error()"""
    return errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]"


def qualified(group: str, resource: str) -> str:
    """schema.GroupResource.String()"""
    return f"{resource}.{group}" if group else resource


def forbidden(group: str, resource: str, name: str, message: str) -> KubernetesError:
    """apierrors.NewForbidden"""
    if not resource:
        text = f"forbidden: {message}"
    elif not name:
        text = f"{qualified(group, resource)} is forbidden: {message}"
    else:
        text = f'{qualified(group, resource)} "{name}" is forbidden: {message}'
    details = {"group": group, "kind": resource, "name": name} if resource else {}
    return KubernetesError(
        status=403,
        reason="Forbidden",
        message=text,
        details={k: v for k, v in details.items() if v},
    )


def forbidden_message(attributes: Attributes) -> str:
    """responsewriters.forbiddenMessage"""
    user = attributes.user.name
    if not attributes.resource_request:
        return f'User "{user}" cannot {attributes.verb} path "{attributes.path}"'
    resource = attributes.resource
    if attributes.subresource:
        resource = f"{resource}/{attributes.subresource}"
    where = (
        f'in the namespace "{attributes.namespace}"'
        if attributes.namespace
        else "at the cluster scope"
    )
    return (
        f'User "{user}" cannot {attributes.verb} resource "{resource}" '
        f'in API group "{attributes.group}" {where}'
    )


def refusal(attributes: Attributes, reason: str) -> KubernetesError:
    """The 403 of a request the authorizer refused (responsewriters.Forbidden)."""
    message = forbidden_message(attributes)
    if reason:
        message = f"{message}: {reason}"
    return forbidden(attributes.group, attributes.resource, attributes.name, message)


# -- escalation -----------------------------------------------------------------------------------


def breakdown(rule: Rule) -> list[dict[str, list[str]]]:
    """validation.BreakdownRule: one rule per group, resource, verb (and resourceName)."""
    subrules: list[dict[str, list[str]]] = []
    names = list(rule.get("resourceNames") or [])
    for group in rule.get("apiGroups") or []:
        for resource in rule.get("resources") or []:
            for verb in rule.get("verbs") or []:
                base = {"apiGroups": [group], "resources": [resource], "verbs": [verb]}
                if names:
                    subrules += [{**base, "resourceNames": [name]} for name in names]
                else:
                    subrules.append(base)
    for url in rule.get("nonResourceURLs") or []:
        for verb in rule.get("verbs") or []:
            subrules.append({"nonResourceURLs": [url], "verbs": [verb]})
    return subrules


def _has_all(owned: Sequence[str], wanted: Sequence[str]) -> bool:
    return all(item in owned for item in wanted)


def _resources_cover(owned: Sequence[str], wanted: Sequence[str]) -> bool:
    if ALL in owned or _has_all(owned, wanted):
        return True
    for path in wanted:
        if path in owned:
            continue
        if "/" not in path:
            return False
        if f"*/{path.split('/', 1)[1]}" not in owned:
            return False
    return True


def _url_covers(owner: str, path: str) -> bool:
    return owner == path or (owner.endswith("*") and path.startswith(owner.rstrip("*")))


def rule_covers(owner: Rule, sub: Mapping[str, list[str]]) -> bool:
    """validation.ruleCovers"""
    owner_verbs = owner.get("verbs") or []
    owner_groups = owner.get("apiGroups") or []
    owner_names = owner.get("resourceNames") or []
    sub_names = sub.get("resourceNames") or []
    return (
        (ALL in owner_verbs or _has_all(owner_verbs, sub.get("verbs") or []))
        and (ALL in owner_groups or _has_all(owner_groups, sub.get("apiGroups") or []))
        and _resources_cover(owner.get("resources") or [], sub.get("resources") or [])
        and all(
            any(_url_covers(url, path) for url in owner.get("nonResourceURLs") or [])
            for path in sub.get("nonResourceURLs") or []
        )
        and (
            not owner_names
            if not sub_names
            else not owner_names or _has_all(owner_names, sub_names)
        )
    )


def covers(
    owner_rules: Sequence[Rule], servant_rules: Sequence[Rule]
) -> tuple[bool, list[dict[str, list[str]]]]:
    """validation.Covers: whether the owner holds every permission, and those it lacks."""
    missing = [
        sub
        for rule in servant_rules
        for sub in breakdown(rule)
        if not any(rule_covers(owner, sub) for owner in owner_rules)
    ]
    return not missing, missing


def compact_rules(rules: Sequence[Mapping[str, list[str]]]) -> list[dict[str, list[str]]]:
    """validation.CompactRules: simple one-group one-resource rules merged across verbs."""
    compacted: list[dict[str, list[str]]] = []
    simple: dict[tuple[str, str, str | None], dict[str, list[str]]] = {}
    for rule in rules:
        names = rule.get("resourceNames") or []
        groups, resources = rule.get("apiGroups") or [], rule.get("resources") or []
        if len(names) > 1 or rule.get("nonResourceURLs") or len(groups) != 1 or len(resources) != 1:
            compacted.append(dict(rule))
            continue
        key = (groups[0], resources[0], names[0] if names else None)
        if key in simple:
            simple[key]["verbs"] = [*simple[key]["verbs"], *(rule.get("verbs") or [])]
        else:
            simple[key] = {k: list(v) for k, v in rule.items()}
    return compacted + list(simple.values())


def _quoted(values: Sequence[str]) -> str:
    """Go's %q of a []string."""
    return (
        "["
        + " ".join('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values)
        + "]"
    )


def compact_string(rule: Mapping[str, list[str]]) -> str:
    """rbacv1helpers.CompactString"""
    parts = [
        f"{label}:{_quoted(rule[key])}"
        for label, key in (
            ("APIGroups", "apiGroups"),
            ("Resources", "resources"),
            ("NonResourceURLs", "nonResourceURLs"),
            ("ResourceNames", "resourceNames"),
            ("Verbs", "verbs"),
        )
        if rule.get(key)
    ]
    return "{" + ", ".join(parts) + "}"


def confirm_no_escalation(
    policy: Policy, user: User, namespace: str, rules: Sequence[Rule]
) -> str | None:
    """validation.ConfirmNoEscalation: None, or why ``user`` may not grant ``rules``."""
    owner_rules, errors = policy.rules_for(user, namespace)
    ok, missing = covers(owner_rules, rules)
    if ok:
        return None
    descriptions = sorted({compact_string(rule) for rule in compact_rules(missing)})
    message = (
        f'user "{user.name}" (groups={_quoted(user.groups)}) is attempting to grant RBAC '
        "permissions not currently held:\n" + "\n".join(descriptions)
    )
    if errors:
        message += f"; resolution errors: [{aggregate(errors)}]"
    return message


def _only_gc_fields(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """rbacregistry.IsOnlyMutatingGCFields: only ownerReferences and finalizers change."""

    def strip(obj: Mapping[str, Any]) -> dict[str, Any]:
        meta = {
            k: v
            for k, v in (obj.get("metadata") or {}).items()
            if k not in ("ownerReferences", "finalizers", "resourceVersion", "generation")
        }
        return {**obj, "metadata": meta}

    return strip(new) == strip(old)


def check_rbac_write(  # noqa: PLR0917 - the storage's arguments
    policy: Policy,
    user: User,
    plural: str,
    namespace: str,
    obj: Mapping[str, Any],
    old: Mapping[str, Any] | None,
    request_name: str = "",
) -> KubernetesError | None:
    """The escalation check of the rbac.authorization.k8s.io storages, on create and update."""
    if user.is_admin or plural not in (
        "roles",
        "clusterroles",
        "rolebindings",
        "clusterrolebindings",
    ):
        return None  # rbacregistry.EscalationAllowed: system:masters
    name = str((obj.get("metadata") or {}).get("name") or "")
    if old is not None and _only_gc_fields(obj, old):
        return None
    if plural in ("roles", "clusterroles"):
        escalate = Attributes(user, "escalate", RBAC_GROUP, plural, "", request_name, namespace)
        if authorize(policy, escalate)[0]:
            return None
        error = confirm_no_escalation(policy, user, namespace, obj.get("rules") or [])
        if error is not None:
            return forbidden(RBAC_GROUP, plural, name, error)
        aggregating = plural == "clusterroles" and obj.get("aggregationRule")
        if aggregating and confirm_no_escalation(policy, user, namespace, FULL_AUTHORITY):
            return forbidden(
                RBAC_GROUP,
                plural,
                name,
                "must have cluster-admin privileges to use the aggregationRule",
            )
        return None
    role_ref = obj.get("roleRef") or {}
    kind = role_ref.get("kind")
    if kind in ("Role", "ClusterRole"):
        bind = Attributes(
            user,
            "bind",
            str(role_ref.get("apiGroup") or ""),
            "roles" if kind == "Role" else "clusterroles",
            "",
            str(role_ref.get("name") or ""),
            namespace,
        )
        if authorize(policy, bind)[0]:
            return None
    rules, _ = policy.role_reference_rules(role_ref, namespace)
    if rules is None:
        plural_kind = "roles" if kind == "Role" else "clusterroles"
        return KubernetesError(
            status=404,
            reason="NotFound",
            message=f'{qualified(RBAC_GROUP, plural_kind)} "{role_ref.get("name")}" not found',
            details={"name": role_ref.get("name"), "group": RBAC_GROUP, "kind": plural_kind},
        )
    error = confirm_no_escalation(policy, user, namespace, rules)
    if error is not None:
        return forbidden(RBAC_GROUP, plural, name, error)
    return None


# -- OwnerReferencesPermissionEnforcement ---------------------------------------------------------


def _owner_refs(obj: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    return list(((obj or {}).get("metadata") or {}).get("ownerReferences") or [])


def is_changing_owner_reference(new: Mapping[str, Any], old: Mapping[str, Any] | None) -> bool:
    if old is None:
        return bool(_owner_refs(new))
    return _owner_refs(new) != _owner_refs(old)


def new_blocking_refs(
    new: Mapping[str, Any], old: Mapping[str, Any] | None
) -> list[Mapping[str, Any]]:
    """The references that are blocking and were not, or were not there."""
    blocking = [ref for ref in _owner_refs(new) if ref.get("blockOwnerDeletion") is True]
    if old is None:
        return blocking
    previous = {ref.get("uid"): ref for ref in _owner_refs(old)}
    return [
        ref
        for ref in blocking
        if ref.get("uid") not in previous
        or previous[ref.get("uid")].get("blockOwnerDeletion") is not True
    ]


# (group, version, kind) -> [(plural, namespaced)]: the emulator's REST mapper
RestMapper = Mapping[tuple[str, str, str], Sequence[tuple[str, bool]]]


def owner_reference_admission(  # noqa: PLR0917 - the plugin's arguments
    policy: Policy,
    user: User,
    attributes: Attributes,
    new: Mapping[str, Any],
    old: Mapping[str, Any] | None,
    rest_mapper: RestMapper,
    object_name: str = "",
) -> KubernetesError | None:
    """gc_admission.go's Validate, for a create (``old`` None) or an update of ``attributes``'s
    object; ``object_name`` names the refused object when the request does not."""
    if attributes.group == "" and (attributes.resource, attributes.subresource) == (
        "pods",
        "status",
    ):
        return None
    if not is_changing_owner_reference(new, old):
        return None
    name = attributes.name or object_name or "Unknown"

    def refused(reason: str) -> KubernetesError:
        return forbidden(attributes.group, attributes.resource, name, reason)

    if old is not None:
        delete = Attributes(
            user,
            "delete",
            attributes.group,
            attributes.resource,
            attributes.subresource,
            attributes.name,
            attributes.namespace,
        )
        allowed, reason = authorize(policy, delete)
        if not allowed:
            return refused(
                f"cannot set an ownerRef on a resource you can't delete: {reason}, <nil>"
            )
    for ref in new_blocking_refs(new, old):
        api_version = str(ref.get("apiVersion") or "")
        group, _, version = api_version.rpartition("/")
        kind = str(ref.get("kind") or "")
        mappings = rest_mapper.get((group, version, kind)) or []
        if not mappings:
            return refused(
                "cannot set blockOwnerDeletion in this case because cannot find RESTMapping for "
                f'APIVersion {api_version} Kind {kind}: no matches for kind "{kind}" in version '
                f'"{api_version}"'
            )
        for plural, namespaced in mappings:
            record = Attributes(
                user,
                "update",
                group,
                plural,
                "finalizers",
                str(ref.get("name") or ""),
                attributes.namespace if namespaced else "",
            )
            allowed, reason = authorize(policy, record)
            if not allowed:
                return refused(
                    "cannot set blockOwnerDeletion if an ownerReference refers to a resource you "
                    f"can't set finalizers on: {reason}, <nil>"
                )
    return None


# -- the emulator's hooks -------------------------------------------------------------------------


def policy_of(emulator: StateEmulator) -> Policy:
    """The Policy of what the emulator stores: built when first asked after an RBAC object
    changed (the emulator forgets it on every such change), not on every request."""
    if emulator.rbac_policy is None:
        emulator.rbac_policy = Policy.of(
            (resource.plural, namespace, obj.raw)
            for (resource, namespace, _), obj in list(emulator._objects.items())
            if resource.group == RBAC_GROUP and not obj.deleted
        )
    return emulator.rbac_policy


def rest_mapper_of(emulator: StateEmulator) -> dict[tuple[str, str, str], list[tuple[str, bool]]]:
    mapper: dict[tuple[str, str, str], list[tuple[str, bool]]] = {}
    for parsed, value in list(emulator.resources.items()):
        # kmock parses every key into a resource and gives every value as a ResourceInfo
        resource, info = cast("kmock.resource", parsed), cast("kmock.ResourceInfo", value)
        if not resource.plural or "/" in resource.plural or not info.kind:
            continue
        key = (resource.group or "", resource.version or "", info.kind)
        mapper.setdefault(key, []).append((resource.plural, bool(info.namespaced)))
    return mapper


def authorize_request(emulator: StateEmulator, user: User, request: kmock.Request) -> None:
    """Remember the caller for admission; with ``emulator.authorize``, refuse what RBAC does."""
    CALLER.set(user)
    if not emulator.authorize or user.is_admin:
        return
    attributes = request_attributes(user, request)
    allowed, reason = authorize(policy_of(emulator), attributes)
    if not allowed:
        raise refusal(attributes, reason)


def admit(
    emulator: StateEmulator,
    request: kmock.Request,
    old: Mapping[str, Any] | None,
    new: Mapping[str, Any],
) -> None:
    """The admission and storage checks of a create (``old`` None) or an update: escalation
    (``emulator.authorize``), owner references (``emulator.owner_reference_enforcement``)."""
    if not (emulator.authorize or emulator.owner_reference_enforcement):
        return
    user = CALLER.get() or admin()
    if user.is_admin:
        return
    attributes = request_attributes(user, request)
    meta = new.get("metadata") or {}
    namespace = attributes.namespace or str(meta.get("namespace") or "")
    policy = policy_of(emulator)
    if emulator.owner_reference_enforcement:
        error = owner_reference_admission(
            policy,
            user,
            attributes,
            new,
            old,
            rest_mapper_of(emulator),
            str(meta.get("name") or meta.get("generateName") or ""),
        )
        if error is not None:
            raise error
    if emulator.authorize and attributes.group == RBAC_GROUP and not attributes.subresource:
        error = check_rbac_write(
            policy, user, attributes.resource, namespace, new, old, attributes.name
        )
        if error is not None:
            raise error
