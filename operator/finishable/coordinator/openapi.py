"""The driver endpoint's OpenAPI document (``GET /openapi.json``, :mod:`finishable.serving`),
apart from its routes so that each reads on its own."""

from __future__ import annotations

from typing import Any

from finishable.serving import COUNT, STRING, openapi, operation

MAX_REQUEST_ID_LENGTH = 200
BATCH_STAGES = ("prepare", "published", "publish")
"""What a sink's commit tells the runtime about a batch (``POST /v1/batches/{batch}/{stage}``)."""

_ATTEMPT = "/v1/coordinators/{name}/subtasks/{subtask}/attempts/{attempt}"
_ATTEMPT_PATH = {"name": STRING, "subtask": COUNT, "attempt": COUNT}
_REQUEST_ID: dict[str, Any] = {"type": "string", "minLength": 1, "maxLength": MAX_REQUEST_ID_LENGTH}
_CALL_ANSWERS = {
    "200": "{ok: true}",
    "400": "a malformed path or body",
    "404": "no coordinator of that name",
    "409": "the call breaks the coordinator's order, or its request id was used for another",
    "500": "the coordinator failed (not retryable)",
}
OPENAPI = openapi(
    "Finishable driver endpoint",
    "The driver's endpoint: its sources' split enumerators as coordinators (FLIP-27), a sink's "
    "batch commit, and a Batch job's task calls.",
    {
        "/v1/health": {"get": operation("Health", responses={"200": "{status}"}, public=True)},
        "/v1/coordinators": {
            "get": operation("Every coordinator's progress", responses={"200": "{coordinators}"})
        },
        "/v1/coordinators/{name}": {
            "get": operation(
                "One coordinator's progress and live attempts",
                path={"name": STRING},
                responses={"200": "{name, progress, failed, live_attempts}", "404": "unknown"},
            )
        },
        _ATTEMPT + "/ready": {
            "post": operation(
                "A reader's execution attempt is ready",
                path=_ATTEMPT_PATH,
                body={"type": "object", "properties": {"request_id": _REQUEST_ID}},
                responses=_CALL_ANSWERS,
            )
        },
        _ATTEMPT + "/failed": {
            "post": operation(
                "A reader's execution attempt failed",
                path=_ATTEMPT_PATH,
                body={
                    "type": "object",
                    "properties": {"request_id": _REQUEST_ID, "reason": STRING},
                },
                responses=_CALL_ANSWERS,
            )
        },
        _ATTEMPT + "/events": {
            "post": operation(
                "An operator event from a reader (a split request, finished splits)",
                path=_ATTEMPT_PATH,
                body={
                    "type": "object",
                    "required": ["event"],
                    "properties": {"request_id": _REQUEST_ID, "event": {"type": "object"}},
                },
                responses={**_CALL_ANSWERS, "200": "{events: [...]}"},
            )
        },
        "/v1/batches/{batch}/{stage}": {
            "post": operation(
                "A sink's commit reached a stage of a batch",
                path={"batch": COUNT, "stage": {"type": "string", "enum": list(BATCH_STAGES)}},
                body={
                    "type": "object",
                    "properties": {
                        "sink": STRING,
                        "parts": {"type": "array", "items": {"type": ["object", "null"]}},
                        "schema": STRING,
                        "overwrite": {"type": "boolean"},
                    },
                },
                responses={
                    "200": "the runtime's reply",
                    "400": "a publish without its parts",
                    "404": "no job runtime here",
                },
            )
        },
        "/v1/runtime/{action}": {
            "post": operation(
                "A Batch task's call to its driver",
                path={"action": STRING},
                body={"type": "object"},
                responses={"200": "the runtime's reply", "400": "refused", "404": "no batch job"},
            )
        },
    },
)
