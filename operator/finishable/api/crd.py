"""Generate the CustomResourceDefinitions (FinishableSparkJob, FinishableSparkSnapshot) from the
pydantic models.

Kubernetes wants a *structural* OpenAPI v3 schema: every node typed, no ``$ref``, no ``anyOf`` of
types, and ``additionalProperties`` never beside ``properties``. Pydantic emits JSON Schema with
references and ``anyOf`` for optionals, so this module rewrites one into the other. The committed
``crds/`` file must equal :func:`render_crd` (a test fails on drift).
"""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel

from finishable import __version__
from finishable.api.models import API_GROUP, API_VERSION, KIND, PLURAL, SHORT_NAME, SINGULAR
from finishable.api.snapshot import (
    SNAPSHOT_KIND,
    SNAPSHOT_PLURAL,
    SNAPSHOT_SHORT_NAME,
    SNAPSHOT_SINGULAR,
    FinishableSparkSnapshotSpec,
    FinishableSparkSnapshotStatus,
)
from finishable.api.spec import FinishableSparkJobSpec
from finishable.api.status import FinishableSparkJobStatus

CRD_NAME = f"{PLURAL}.{API_GROUP}"
CRD_FILE = f"crds/{CRD_NAME}.yaml"
SNAPSHOT_CRD_NAME = f"{SNAPSHOT_PLURAL}.{API_GROUP}"
SNAPSHOT_CRD_FILE = f"crds/{SNAPSHOT_CRD_NAME}.yaml"

_DROPPED_KEYS = frozenset({"title", "$defs", "discriminator"})


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Inline ``$ref`` and single-element ``allOf``; sibling keys (descriptions) win."""
    while "$ref" in node or ("allOf" in node and len(node["allOf"]) == 1):
        siblings = {key: value for key, value in node.items() if key not in ("$ref", "allOf")}
        ref = node.get("$ref")
        target = defs[ref.rsplit("/", 1)[-1]] if ref else node["allOf"][0]
        node = {**target, **siblings}
    return node


def _structural(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Rewrite one JSON Schema node (and its children) into a structural schema node."""
    node = _resolve(node, defs)
    if "anyOf" in node:
        variants = [variant for variant in node["anyOf"] if variant.get("type") != "null"]
        if len(variants) != 1:
            raise ValueError(f"cannot express a union of {len(variants)} types structurally")
        siblings = {key: value for key, value in node.items() if key != "anyOf"}
        merged = {**_resolve(variants[0], defs), **siblings}
        if merged.get("default", "") is None:
            del merged["default"]
        return _structural(merged, defs)

    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED_KEYS:
            continue
        if key == "properties":
            out["properties"] = {}
            for name, child in value.items():
                converted = _structural(child, defs)
                # Give nested objects with defaults of their own a default, so that the API
                # server fills those in; not optional ones (``None`` by default) and not ones
                # with required fields (an empty default would be invalid).
                if (
                    converted["type"] == "object"
                    and "properties" in converted
                    and "default" not in converted
                    and "required" not in converted
                    and "anyOf" not in _resolve(child, defs)
                ):
                    converted["default"] = _default_of(converted)
                out["properties"][name] = converted
        elif key == "items":
            out["items"] = _structural(value, defs)
        elif key == "additionalProperties":
            if isinstance(value, dict):
                out["additionalProperties"] = _structural(value, defs)
            elif value is True:  # a Kubernetes object whose other fields pass through
                out["x-kubernetes-preserve-unknown-fields"] = True
        elif key == "default" and value is None:
            continue
        elif key == "description":
            out[key] = _unwrapped(value)
        else:
            out[key] = value

    if "enum" in out and "type" not in out:
        out["type"] = "string"
    if "properties" in out:
        out["type"] = "object"
        out.pop("additionalProperties", None)
    if "type" not in out and not out.get("x-kubernetes-int-or-string"):
        raise ValueError(f"schema node without a type: {node!r}")
    return _ordered(out)


def _default_of(node: dict[str, Any]) -> dict[str, Any]:
    """An object's default: ``{}``, which the API server fills in field by field, unless a
    cross-field rule lies below it. The server checks a default against the rules as written,
    without filling in the defaults below it, so there the default is written out in full."""
    if not _has_rules(node):
        return {}
    return {
        name: child["default"] for name, child in node["properties"].items() if "default" in child
    }


def _has_rules(node: dict[str, Any]) -> bool:
    children = [*node.get("properties", {}).values()]
    if isinstance(node.get("items"), dict):
        children.append(node["items"])
    return "x-kubernetes-validations" in node or any(_has_rules(child) for child in children)


def _unwrapped(text: str) -> str:
    """A docstring's wrapped lines joined into one line per paragraph or ``- `` item:
    ``kubectl explain`` prints newlines as they are, so a wrap would break a sentence there."""
    paragraphs: list[str] = []
    for line in (line.strip() for line in text.split("\n")):
        if not line or not paragraphs or not paragraphs[-1] or line.startswith("- "):
            paragraphs.append(line)
        else:
            paragraphs[-1] += " " + line
    return "\n".join(paragraphs)


_KEY_ORDER = (
    "description",
    "type",
    "format",
    "enum",
    "default",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "required",
    "properties",
    "items",
    "additionalProperties",
)


def _ordered(node: dict[str, Any]) -> dict[str, Any]:
    """Stable key order so the generated YAML reads well and diffs cleanly."""
    ranked = sorted(
        node.items(),
        key=lambda item: (_KEY_ORDER.index(item[0]) if item[0] in _KEY_ORDER else 99, item[0]),
    )
    return dict(ranked)


def _model_schema(model: type[BaseModel]) -> Any:
    schema = model.model_json_schema(by_alias=True, mode="validation")
    return _structural(schema, schema.get("$defs", {}))


def _without_defaults(node: dict[str, Any]) -> dict[str, Any]:
    """Status is written by the operator alone: the API server must not invent any of it."""
    out = {key: value for key, value in node.items() if key != "default"}
    if "properties" in out:
        out["properties"] = {
            name: _without_defaults(child) for name, child in out["properties"].items()
        }
    if "items" in out:
        out["items"] = _without_defaults(out["items"])
    return out


def _crd(
    *,
    kind: str,
    plural: str,
    singular: str,
    short_name: str,
    description: str,
    columns: list[dict[str, Any]],
    spec_schema: dict[str, Any],
    status_schema: dict[str, Any],
    required: list[str],
) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{API_GROUP}",
            "labels": {
                "app.kubernetes.io/name": "finishable-spark-operator",
                "app.kubernetes.io/version": __version__,
            },
        },
        "spec": {
            "group": API_GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": singular,
                "shortNames": [short_name],
                "categories": ["finishable"],
            },
            "versions": [
                {
                    "name": API_VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {
                        "openAPIV3Schema": {
                            "description": description,
                            "type": "object",
                            **({"required": required} if required else {}),
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema,
                                "status": status_schema,
                            },
                        }
                    },
                }
            ],
        },
    }


_AGE = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def build_crd() -> dict[str, Any]:
    """The FinishableSparkJob CustomResourceDefinition as a dict."""
    return _crd(
        kind=KIND,
        plural=PLURAL,
        singular=SINGULAR,
        short_name=SHORT_NAME,
        description=(
            "A PySpark job with Flink-style lifecycle guarantees: stop with "
            "savepoint, stop with drain, final checkpoint, batch recovery."
        ),
        columns=[
            {
                "name": "Phase",
                "type": "string",
                "description": "Where the job is in its life.",
                "jsonPath": ".status.phase",
            },
            {
                "name": "State",
                "type": "string",
                "description": "The desired state.",
                "jsonPath": ".spec.state",
            },
            {
                "name": "Checkpoint",
                "type": "integer",
                "description": "The newest completed checkpoint.",
                "jsonPath": ".status.lastCheckpoint.id",
            },
            {
                "name": "Attempt",
                "type": "integer",
                "description": "Driver attempt.",
                "jsonPath": ".status.attempt",
            },
            {
                "name": "Executors",
                "type": "integer",
                "priority": 1,
                "description": "Executor pods of the current attempt (the autoscaler's count).",
                "jsonPath": ".status.executors",
            },
            {
                "name": "Mode",
                "type": "string",
                "priority": 1,
                "description": "Streaming or Batch.",
                "jsonPath": ".spec.mode",
            },
            _AGE,
        ],
        spec_schema=_model_schema(FinishableSparkJobSpec),
        status_schema=_without_defaults(_model_schema(FinishableSparkJobStatus)),
        required=["spec"],
    )


def build_snapshot_crd() -> dict[str, Any]:
    """The FinishableSparkSnapshot CustomResourceDefinition as a dict."""
    return _crd(
        kind=SNAPSHOT_KIND,
        plural=SNAPSHOT_PLURAL,
        singular=SNAPSHOT_SINGULAR,
        short_name=SNAPSHOT_SHORT_NAME,
        description=(
            "A savepoint of a FinishableSparkJob, recorded by the operator when it completes; "
            "a job starts from one with spec.restoreFrom.snapshotRef."
        ),
        columns=[
            {
                "name": "Job",
                "type": "string",
                "description": "The job it is a snapshot of.",
                "jsonPath": ".spec.jobName",
            },
            {
                "name": "Trigger",
                "type": "string",
                "description": "What asked for it.",
                "jsonPath": ".status.trigger",
            },
            {
                "name": "State",
                "type": "string",
                "description": "Pending, InProgress, Completed, Failed or Abandoned.",
                "jsonPath": ".status.state",
            },
            {
                "name": "Id",
                "type": "integer",
                "description": "The checkpoint (micro-batch) id it holds.",
                "jsonPath": ".status.checkpointId",
            },
            {
                "name": "Drained",
                "type": "boolean",
                "description": "Taken by a stop with drain.",
                "jsonPath": ".status.drained",
            },
            {
                "name": "Location",
                "type": "string",
                "description": "Where the savepoint is stored.",
                "jsonPath": ".status.location",
            },
            _AGE,
        ],
        spec_schema=_model_schema(FinishableSparkSnapshotSpec),
        status_schema=_without_defaults(_model_schema(FinishableSparkSnapshotStatus)),
        required=[],
    )


_HEADER = "# Generated by `finishable crd` from finishable.api.models; do not edit by hand.\n"


def _render(crd: dict[str, Any], command: str) -> str:
    header = _HEADER.replace("`finishable crd`", f"`{command}`")
    return header + yaml.safe_dump(crd, sort_keys=False, width=100, allow_unicode=True)


def render_crd() -> str:
    """The job CRD as YAML, exactly as committed under ``crds/``."""
    return _render(build_crd(), "finishable crd")


def render_snapshot_crd() -> str:
    """The snapshot CRD as YAML, exactly as committed under ``crds/``."""
    return _render(build_snapshot_crd(), "finishable crd --snapshot")
