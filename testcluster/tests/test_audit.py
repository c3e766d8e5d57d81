"""The real API server's audit log as the checks read it: what a user asked, and which of its
requests were refused (a JSON patch that lost a race is a conflict, not a refusal)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from testcluster.controlplane.audit import AuditLog

pytestmark = pytest.mark.quick

OPERATOR = "system:serviceaccount:finishable-system:finishable-spark-operator"


def event(
    user: str, verb: str, code: int, request: Any = None, stage: str = "ResponseComplete"
) -> dict[str, Any]:
    return {
        "stage": stage,
        "user": {"username": user},
        "verb": verb,
        "requestURI": f"/api/v1/namespaces/jobs/pods/{verb}",
        "objectRef": {"resource": "pods", "name": verb},
        "responseStatus": {"code": code, "reason": "Invalid" if code == 422 else ""},
        "requestObject": request,
    }


def test_refusals_are_the_users_own_and_a_lost_json_patch_test_is_a_conflict(
    tmp_path: Path,
) -> None:
    test_then_add = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "265"},
        {"op": "add", "path": "/metadata/finalizers", "value": ["finishable.dev/cleanup"]},
    ]
    events = [
        event(OPERATOR, "create", 201),
        event(OPERATOR, "create", 201, stage="ResponseStarted"),  # a watch's first stage
        event(OPERATOR, "patch", 422, request=test_then_add),  # lost the race: read again
        event(OPERATOR, "update", 422, request={"spec": {"replicas": -1}}),  # invalid
        event(OPERATOR, "delete", 403),  # not allowed
        event(OPERATOR, "get", 404),  # allowed; the object is gone
        event("someone-else", "delete", 403),
    ]
    log = tmp_path / "audit.log"
    log.write_text("".join(json.dumps(e) + "\n" for e in events))
    audit = AuditLog(log)

    assert [e["verb"] for e in audit.requests(OPERATOR)] == [
        "create", "patch", "update", "delete", "get",
    ]  # fmt: skip
    assert [e["verb"] for e in audit.requests(OPERATOR, verb="create", resource="pods")] == [
        "create"
    ]
    assert [(r["verb"], r["code"]) for r in audit.refused(OPERATOR)] == [
        ("update", 422),
        ("delete", 403),
    ]


def test_no_log_yet_is_no_request(tmp_path: Path) -> None:
    assert AuditLog(tmp_path / "missing.log").requests(OPERATOR) == []
