"""The API server's audit log (one JSON event per line, level Metadata): who asked for what,
and what the server answered. What RBAC checks and what a production server refuses is here,
not in the client's view of it."""

from __future__ import annotations

import collections
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REFUSED = frozenset({401, 403, 422})
"""Refusals of the request itself: not authenticated, not authorised, invalid. A 404 or a 409
answers a request that was allowed (the object is gone, or is already there; or changed since
it was read, which :func:`lost_race` tells apart from an invalid request)."""


@dataclass(frozen=True)
class AuditLog:
    path: Path

    def events(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        lines = self.path.read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def completed(self) -> list[dict[str, Any]]:
        """The events of requests answered whole (a watch's first stage aside)."""
        return [e for e in self.events() if e.get("stage") == "ResponseComplete"]

    def requests(
        self, user: str, *, verb: str | None = None, resource: str | None = None
    ) -> list[dict[str, Any]]:
        """``user``'s requests, completed (``ResponseComplete``), of ``verb`` on ``resource``."""
        found = []
        for event in self.completed():
            if (event.get("user") or {}).get("username") != user:
                continue
            if verb is not None and event.get("verb") != verb:
                continue
            if resource is not None and (event.get("objectRef") or {}).get("resource") != resource:
                continue
            found.append(event)
        return found

    def calls(self) -> list[dict[str, Any]]:
        """Every completed request counted by client (the User-Agent up to its first ``/``),
        verb, group, resource (``plural/subresource``) and scope, or by non-resource path: the
        API emulator's ``/_emulator/calls``, which the RBAC checks read."""
        counted: collections.Counter[tuple[str, str, str, str, bool, str]] = collections.Counter()
        for event in self.completed():
            client = str(event.get("userAgent") or "").split("/")[0]
            ref = event.get("objectRef") or {}
            resource = str(ref.get("resource") or "")
            if ref.get("subresource"):
                resource = f"{resource}/{ref['subresource']}"
            path = "" if resource else str(event.get("requestURI") or "").split("?")[0]
            key = (
                client,
                str(event.get("verb") or ""),
                str(ref.get("apiGroup") or ""),
                resource,
                bool(ref.get("namespace")),
                path,
            )
            counted[key] += 1
        fields = ("client", "verb", "group", "resource", "namespaced", "path")
        return [{**dict(zip(fields, key, strict=True)), "count": n} for key, n in counted.items()]

    def refusals(self) -> list[dict[str, Any]]:
        """Every request refused (a lost race aside) or failed by the server, by any client:
        the API emulator's ``/_emulator/refusals``."""
        return [
            {
                "client": str(event.get("userAgent") or "").split("/")[0],
                "method": event.get("verb"),
                "path": event.get("requestURI"),
                "status": (event.get("responseStatus") or {}).get("code"),
                "message": (event.get("responseStatus") or {}).get("message"),
            }
            for event in self.completed()
            if _refused_or_failed((event.get("responseStatus") or {}).get("code"))
            and not lost_race(event)
        ]

    def refused(self, user: str) -> list[dict[str, Any]]:
        """``user``'s requests the server refused: verb, object and the server's answer."""
        return [
            {
                "verb": event.get("verb"),
                "uri": event.get("requestURI"),
                "code": (event.get("responseStatus") or {}).get("code"),
                "reason": (event.get("responseStatus") or {}).get("reason"),
                "message": (event.get("responseStatus") or {}).get("message"),
                # where the policy keeps bodies: what was asked and the server's whole answer
                "request": event.get("requestObject"),
                "response": event.get("responseObject"),
            }
            for event in self.requests(user)
            if (event.get("responseStatus") or {}).get("code") in REFUSED and not lost_race(event)
        ]


def _refused_or_failed(code: Any) -> bool:
    return isinstance(code, int) and (code in REFUSED or code in (400, 405) or code >= 500)


def lost_race(event: dict[str, Any]) -> bool:
    """A JSON patch whose ``test`` of the resourceVersion failed: the object changed since it was
    read. The server answers 422 (RFC 6902: a failed test fails the patch), but it is a conflict,
    as a 409 is: kopf adds its finalizer so, and reads the object again when it loses."""
    operations = event.get("requestObject")
    return (
        (event.get("responseStatus") or {}).get("code") == 422
        and isinstance(operations, list)
        and any(
            op.get("op") == "test" and op.get("path") == "/metadata/resourceVersion"
            for op in operations
            if isinstance(op, dict)
        )
    )
