"""The shuffle server's OpenAPI document (``GET /openapi.json``, :mod:`finishable.serving`),
apart from its routes so that each reads on its own."""

from __future__ import annotations

from finishable.serving import COUNT, STRING, openapi, operation

ARROW_STREAM_TYPE = "application/vnd.apache.arrow.stream"
"""A partition's body, uploaded and downloaded: an Arrow IPC stream."""

_PARTITION = {"dataset": STRING, "partition": COUNT}
_FLAG = {"type": "string", "enum": ["true", "false"]}
_EPOCH = {"type": "string", "pattern": "^[0-9]+[.][0-9]+$"}
OPENAPI = openapi(
    "Finishable shuffle server",
    "A Batch job's result partitions (Arrow IPC streams) on a shuffle pod, kept for a reconnect "
    "timeout without a driver (FLIP-383).",
    {
        "/healthz": {
            "get": operation("Health", responses={"200": "{status, job, driver}"}, public=True)
        },
        "/metrics": {
            "get": operation("Prometheus metrics", responses={"200": "text"}, public=True)
        },
        "/v1/drivers": {
            "post": operation(
                "Register a driver attempt, or heartbeat it",
                body={
                    "type": "object",
                    "required": ["attempt"],
                    "properties": {"attempt": COUNT, "run": COUNT},
                },
                responses={"200": "{job, attempt, partitions}", "409": "a newer attempt"},
            )
        },
        "/v1/partitions": {
            "get": operation(
                "The committed partitions (verified on request)",
                query={"dataset": STRING, "verify": _FLAG},
                responses={"200": "{job, partitions, corrupt}"},
            ),
            "delete": operation(
                "Release the job's partitions",
                query={"includePromoted": _FLAG},
                responses={"200": "{released}"},
            ),
        },
        "/v1/partitions/{dataset}": {
            "delete": operation(
                "Release a dataset's partitions",
                path={"dataset": STRING},
                responses={"200": "{released}"},
            )
        },
        "/v1/partitions/{dataset}/{partition}": {
            "put": operation(
                "Upload a partition (uncommitted unless commit=true)",
                path=_PARTITION,
                query={"attempt": STRING, "epoch": _EPOCH, "commit": _FLAG},
                body={"type": "string", "format": "binary"},
                body_type=ARROW_STREAM_TYPE,
                responses={"200": "the upload or the partition", "400": "not Arrow", "409": "old"},
            ),
            "get": operation(
                "Download a committed partition",
                path=_PARTITION,
                responses={"200": "the Arrow IPC stream", "404": "no such partition"},
            ),
        },
        "/v1/partitions/{dataset}/{partition}/commit": {
            "post": operation(
                "Commit an upload as the partition",
                path=_PARTITION,
                body={
                    "type": "object",
                    "required": ["upload"],
                    "properties": {"upload": STRING, "epoch": _EPOCH},
                },
                responses={"200": "the partition", "404": "no such upload", "409": "old"},
            )
        },
        "/v1/datasets": {"get": operation("The datasets", responses={"200": "[{...}]"})},
        "/v1/datasets/{dataset}/promote": {
            "post": operation(
                "Keep a dataset beyond the job (FLIP-67)",
                path={"dataset": STRING},
                responses={"200": "the dataset", "404": "no such dataset"},
            )
        },
    },
)
