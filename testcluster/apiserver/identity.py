"""Who is calling the API emulator: bearer tokens mapped to users, as a real API server's
authenticators map them.

The emulator's ``required_token`` is the cluster admin's (a member of ``system:masters``, which
RBAC never refuses). Service-account tokens are issued by the TokenRequest API
(``POST .../serviceaccounts/NAME/token``) and name ``system:serviceaccount:NS:NAME`` with the
groups a real server gives them. Every authenticated user is also in ``system:authenticated``.
"""

from __future__ import annotations

from dataclasses import dataclass

ADMIN = "kubernetes-admin"
MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"


@dataclass(frozen=True)
class User:
    """A user as RBAC sees it (the authenticator's UserInfo)."""

    name: str
    groups: tuple[str, ...] = ()
    # For a service account's token: the account it was issued for, and the pod it is bound to.
    service_account: tuple[str, str] | None = None  # (namespace, name)
    bound_pod: str | None = None

    @property
    def is_admin(self) -> bool:
        return MASTERS in self.groups


def admin() -> User:
    return User(ADMIN, (MASTERS, AUTHENTICATED))


def service_account_user(namespace: str, name: str, *, pod: str | None = None) -> User:
    return User(
        f"system:serviceaccount:{namespace}:{name}",
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHENTICATED),
        service_account=(namespace, name),
        bound_pod=pod,
    )
