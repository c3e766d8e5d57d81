"""What a real API server does to a custom resource with its CRD's structural schema, on every
write (create, replace, patch), whatever the client asks (apiextensions-apiserver's
``unstructuredSchemaCoercer`` and ``structuraldefaulting``):

* pruning (``schema/pruning/algorithm.go``): a field not in ``properties`` is dropped, unless
  the schema says ``x-kubernetes-preserve-unknown-fields: true``; the keys of an
  ``additionalProperties`` map stay (their values are pruned with its schema); ``apiVersion``,
  ``kind`` and ``metadata`` at the root (and in ``x-kubernetes-embedded-resource`` objects) are
  kept; unknown ``metadata`` fields are dropped. The dropped paths are reported as the server
  writes them: ``spec.foo``, ``spec.items[0].bar``, ``metadata.foo``;
* ``null`` for a non-nullable field without a default is dropped;
* defaulting (``structuraldefaulting.Default``): a property with a ``default`` that is absent
  (or a non-nullable ``null``) is set when its parent object is present, recursively (defaults
  inside defaults apply too), for the items of arrays and the values of maps as well.

Unknown fields then answer by the request's ``fieldValidation``: ``Ignore`` drops them quietly,
``Warn`` (the default) adds a ``Warning: 299 - "unknown field \\"spec.foo\\""`` header per field,
``Strict`` refuses the request: 400 on create and replace, 422 on patch (see ``unknown_fields``).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from kmock import KubernetesError

from testcluster.apiserver import params

_META_FIELDS = ("apiVersion", "kind", "metadata")
OBJECT_META_FIELDS = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    }
)

Schema = Mapping[str, Any]


def _join(parent: str, key: str) -> str:
    return f"{parent}.{key}" if parent else key


def _additional(schema: Schema) -> Schema | None:
    """The schema of a map's values (``additionalProperties``), None when it is no map."""
    extra = schema.get("additionalProperties")
    if isinstance(extra, Mapping):
        return extra
    if extra is True:
        return {}
    return None


def _prune(value: Any, schema: Schema | None, path: str, pruned: list[str]) -> None:
    """Drop what ``schema`` does not declare; below ``x-kubernetes-preserve-unknown-fields``
    keep unknown fields but still prune inside the declared ones (as the server does)."""
    keep_unknown = schema is not None and bool(schema.get("x-kubernetes-preserve-unknown-fields"))
    if isinstance(value, dict):
        if schema is None:
            for key in list(value):
                pruned.append(_join(path, key))
                del value[key]
            return
        embedded = schema.get("x-kubernetes-embedded-resource")
        properties = schema.get("properties") or {}
        extra = _additional(schema)
        for key in list(value):
            if embedded and key in _META_FIELDS:
                continue
            if key in properties:
                _prune(value[key], properties[key], _join(path, key), pruned)
            elif extra is not None:
                _prune(value[key], extra, _join(path, key), pruned)
            elif not keep_unknown:
                if key not in _META_FIELDS or path:
                    pruned.append(_join(path, key))
                del value[key]
    elif isinstance(value, list):
        items = schema.get("items") if schema is not None else None
        if keep_unknown and items is None:
            items = {"x-kubernetes-preserve-unknown-fields": True}
        for index, item in enumerate(value):
            _prune(item, items, f"{path}[{index}]", pruned)


def prune(obj: dict[str, Any], schema: Schema) -> list[str]:
    """Prune a custom resource in place; the dropped paths, as the server reports them
    (unknown ``metadata`` fields first, then the rest sorted)."""
    saved = {key: obj.pop(key) for key in _META_FIELDS if key in obj}
    meta_unknown: list[str] = []
    metadata = saved.get("metadata")
    if isinstance(metadata, dict):
        for key in sorted(metadata):
            if key not in OBJECT_META_FIELDS:
                meta_unknown.append(f"metadata.{key}")
                del metadata[key]
    pruned: list[str] = []
    _prune(obj, schema, "", pruned)
    _drop_non_nullable_nulls(obj, schema)
    obj.update(saved)
    return meta_unknown + sorted(pruned)


def _drop_non_nullable_nulls(value: Any, schema: Schema | None) -> None:
    """``PruneNonNullableNullsWithoutDefaults``."""
    if schema is None:
        return
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        extra = _additional(schema)
        for key in list(value):
            sub = properties.get(key, extra)
            if sub is None:
                continue
            if value[key] is None and not sub.get("nullable") and "default" not in sub:
                del value[key]
            else:
                _drop_non_nullable_nulls(value[key], sub)
    elif isinstance(value, list):
        for item in value:
            _drop_non_nullable_nulls(item, schema.get("items"))


def default(value: Any, schema: Schema | None) -> None:
    """``structuraldefaulting.Default``, in place."""
    if schema is None:
        return
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        for key, sub in properties.items():
            if "default" not in sub:
                continue
            if key not in value or (value[key] is None and not sub.get("nullable")):
                value[key] = copy.deepcopy(sub["default"])
        extra = _additional(schema)
        for key, item in value.items():
            if key in properties:
                default(item, properties[key])
            elif extra is not None:
                default(item, extra)
    elif isinstance(value, list):
        for item in value:
            default(item, schema.get("items"))


def coerce(obj: dict[str, Any], schema: Schema) -> list[str]:
    """Prune, then default, a custom resource in place; the unknown field paths."""
    unknown = prune(obj, schema)
    default(obj, schema)
    return unknown


def unknown_fields(
    unknown: list[str], obj: Mapping[str, Any], kind: str, version: str, *, verb: str
) -> None:
    """Answer unknown fields by the request's ``fieldValidation``: warnings under Warn, an
    error under Strict, nothing under Ignore."""
    if not unknown:
        return
    directive = params.current().validation
    errors = [f'unknown field "{path}"' for path in unknown]
    if directive == "Warn":
        for error in errors:
            params.add_warning(error)
        return
    if directive != "Strict":
        return
    strict = "strict decoding error: " + ", ".join(errors)
    if verb == "patch":  # handlers/patch.go: the patched object fails to decode strictly
        patched = json.dumps(obj, sort_keys=True, separators=(",", ":"))
        detail = params.field_error("patch", "Invalid value", patched, strict)
        # errors.NewInvalid(schema.GroupKind{}, "", ...): an empty kind, hence the leading space
        raise KubernetesError(status=422, reason="Invalid", message=f' "" is invalid: {detail}')
    # handlers/rest.go transformDecodeError, for create and update
    body_kind = str(obj.get("kind") or kind)
    api_version = str(obj.get("apiVersion") or "")
    body_version = api_version.rpartition("/")[2] if api_version else version
    raise params.bad_request(
        f"{body_kind} in version {params.go_quote(body_version)} cannot be handled as a "
        f"{kind}: {strict}"
    )
