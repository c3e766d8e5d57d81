"""Query parameters as a real Kubernetes API server (v1.33-1.36) reads and validates them.

The server decodes a request's query into the verb's options struct (``ListOptions``,
``CreateOptions``, ``UpdateOptions``, ``PatchOptions``, ``DeleteOptions``) with the conversions
of apimachinery's ``runtime/conversion.go``, then validates the struct:

* an int64 (``timeoutSeconds``, ``limit``, ``gracePeriodSeconds``) goes through Go's
  ``strconv.ParseInt(s, 10, 64)``: ``"300.0"``, ``"1e3"``, ``" 5"`` or ``""`` answer
  400 BadRequest ``strconv.ParseInt: parsing "300.0": invalid syntax`` (or ``value out of range``);
* a bool (``watch``, ``allowWatchBookmarks``, ``sendInitialEvents``, ``orphanDependents``,
  ``force``) is false only for ``false`` (any case) and ``0``; anything else, even empty, is true;
* only the first value of a repeated parameter counts (``dryRun`` is a list: all of them);
* enumerations are checked by the options' validation, 422 Invalid naming the options kind:
  ``CreateOptions.meta.k8s.io "" is invalid: fieldValidation: Unsupported value: "strict":
  supported values: "", "Ignore", "Strict", "Warn"``;
* unknown parameters are ignored.

``parse(verb, query, body)`` does this for one request and returns its ``Options``. The module
also carries what one request collects while it is served (``Warning`` headers, the options),
in context variables that the emulator sets per request.
"""

from __future__ import annotations

import contextvars
import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import attrs
from kmock import KubernetesError

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
FIELD_VALIDATION = ("Ignore", "Strict", "Warn")  # and "" (unset), which means Warn
PROPAGATION = ("Foreground", "Background", "Orphan")
DRY_RUN_ALL = "All"
_DIGITS = re.compile(r"[+-]?[0-9]+")
_WRITE_VERBS = {"create": "CreateOptions", "update": "UpdateOptions", "patch": "PatchOptions"}


class Query(Protocol):
    """A multi-valued query (yarl's or aiohttp's MultiDict)."""

    def getall(self, key: str, default: list[str], /) -> list[str]: ...

    def __contains__(self, key: object) -> bool: ...


@attrs.frozen(kw_only=True)
class Options:
    """The options a request's query (and a DELETE's body) decode to; None where unset."""

    verb: str = ""
    watch: bool = False
    allow_watch_bookmarks: bool = False
    send_initial_events: bool | None = None
    timeout_seconds: int | None = None
    limit: int = 0
    resource_version: str = ""
    resource_version_match: str = ""
    continue_token: str = ""
    grace_period_seconds: int | None = None
    precondition_uid: str | None = None  # DeleteOptions.preconditions (a body only)
    precondition_resource_version: str | None = None
    orphan_dependents: bool | None = None
    propagation_policy: str | None = None
    dry_run: tuple[str, ...] = ()
    field_manager: str = ""
    field_validation: str = ""  # "" is the server's default: Warn

    @property
    def is_dry_run(self) -> bool:
        return DRY_RUN_ALL in self.dry_run

    @property
    def validation(self) -> str:
        """The effective field-validation directive (unset means Warn, as on the server)."""
        return self.field_validation or "Warn"


# -- Go's formatting ------------------------------------------------------------------------


def go_quote(text: str) -> str:
    """Go's ``%q`` / ``strconv.Quote`` for a string (printable Unicode is kept)."""
    out = ['"']
    for char in text:
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif char == "\t":
            out.append("\\t")
        elif char == "\r":
            out.append("\\r")
        elif char.isprintable():
            out.append(char)
        elif ord(char) < 0x80:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) <= 0xFFFF:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    out.append('"')
    return "".join(out)


def field_error(path: str, kind: str, value: Any = None, detail: str = "") -> str:
    """One ``field.Error`` as its ``Error()`` prints it: ``path: Type[: value][: detail]``."""
    body = kind
    if kind not in ("Forbidden", "Required", "Too long", "Internal error"):
        if value is None:
            body += ": null"
        elif isinstance(value, str):
            body += f": {go_quote(value)}"
        elif isinstance(value, bool):
            body += f": {str(value).lower()}"
        elif isinstance(value, (int, float)):
            body += f": {value}"
        elif isinstance(value, (list, tuple)):  # %#v of a []string
            body += ": []string{" + ", ".join(go_quote(str(v)) for v in value) + "}"
        else:
            body += f": {value!r}"
    if detail:
        body += f": {detail}"
    return f"{path}: {body}"


def not_supported(path: str, value: Any, supported: Sequence[str]) -> str:
    detail = "supported values: " + ", ".join(go_quote(v) for v in supported)
    return field_error(path, "Unsupported value", value, detail)


def invalid(group_kind: str, name: str, errors: Sequence[str]) -> KubernetesError:
    """apimachinery's ``errors.NewInvalid``: 422, the errors aggregated as Go prints them."""
    aggregate = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
    return KubernetesError(
        status=422,
        reason="Invalid",
        message=f"{group_kind} {go_quote(name)} is invalid: {aggregate}",
    )


def bad_request(message: str) -> KubernetesError:
    return KubernetesError(status=400, reason="BadRequest", message=message)


# -- conversions (apimachinery runtime/conversion.go) ----------------------------------------


def parse_int64(text: str) -> int:
    """Go's ``strconv.ParseInt(text, 10, 64)``; its error text becomes a 400 BadRequest."""
    if not _DIGITS.fullmatch(text):
        raise bad_request(f"strconv.ParseInt: parsing {go_quote(text)}: invalid syntax")
    value = int(text)
    if not INT64_MIN <= value <= INT64_MAX:
        raise bad_request(f"strconv.ParseInt: parsing {go_quote(text)}: value out of range")
    return value


def parse_bool(text: str) -> bool:
    """``Convert_Slice_string_To_bool``: only ``false`` (any case) and ``0`` are false."""
    return text.lower() not in ("false", "0")


def _first(query: Query, key: str) -> str | None:
    values = query.getall(key, [])
    return values[0] if values else None


def _int(query: Query, key: str) -> int | None:
    text = _first(query, key)
    return None if text is None else parse_int64(text)


def _bool(query: Query, key: str) -> bool | None:
    text = _first(query, key)
    return None if text is None else parse_bool(text)


# -- the options of each verb -----------------------------------------------------------------


def _list_options(query: Query) -> dict[str, Any]:
    """``ListOptions``: decoded (400 on a bad int), then ``ValidateListOptions`` (422)."""
    options: dict[str, Any] = {
        "watch": bool(_bool(query, "watch")),
        "allow_watch_bookmarks": bool(_bool(query, "allowWatchBookmarks")),
        "send_initial_events": _bool(query, "sendInitialEvents"),
        "timeout_seconds": _int(query, "timeoutSeconds"),
        "limit": _int(query, "limit") or 0,
        "resource_version": _first(query, "resourceVersion") or "",
        "resource_version_match": _first(query, "resourceVersionMatch") or "",
        "continue_token": _first(query, "continue") or "",
    }
    errors: list[str] = []
    match, version = options["resource_version_match"], options["resource_version"]
    path = "resourceVersionMatch"

    def forbid(detail: str) -> None:
        errors.append(field_error(path, "Forbidden", detail=detail))

    if options["watch"]:
        send = options["send_initial_events"]
        if send is not None and match != "NotOlderThan":
            forbid("sendInitialEvents requires setting resourceVersionMatch to NotOlderThan")
        if match:
            if send is None:
                forbid(
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is "
                    "provided"
                )
            if match != "NotOlderThan":
                errors.append(not_supported(path, match, ["NotOlderThan"]))
            if options["continue_token"]:
                forbid("resourceVersionMatch is forbidden when continue is provided")
    else:
        if match:
            if not version:
                forbid("resourceVersionMatch is forbidden unless resourceVersion is provided")
            if options["continue_token"]:
                forbid("resourceVersionMatch is forbidden when continue is provided")
            if match not in ("Exact", "NotOlderThan"):
                errors.append(not_supported(path, match, ["Exact", "NotOlderThan", ""]))
            if match == "Exact" and version == "0":
                forbid('resourceVersionMatch "exact" is forbidden for resourceVersion "0"')
        if options["send_initial_events"] is not None:
            errors.append(
                field_error(
                    "sendInitialEvents",
                    "Forbidden",
                    detail="sendInitialEvents is forbidden for list",
                )
            )
    if errors:
        raise invalid("ListOptions.meta.k8s.io", "", errors)
    return options


def _dry_run_errors(dry_run: Sequence[str]) -> list[str]:
    if all(value == DRY_RUN_ALL for value in dry_run):
        return []
    return [not_supported("dryRun", list(dry_run), [DRY_RUN_ALL])]


def _write_options(verb: str, query: Query) -> dict[str, Any]:
    """``CreateOptions`` / ``UpdateOptions`` / ``PatchOptions`` and their validation."""
    force = _bool(query, "force") if verb == "patch" else None
    options: dict[str, Any] = {
        "dry_run": tuple(query.getall("dryRun", [])),
        "field_manager": _first(query, "fieldManager") or "",
        "field_validation": _first(query, "fieldValidation") or "",
    }
    errors: list[str] = []
    if force is not None:  # apply patches (the only ones that take it) are not served here
        errors.append(
            field_error("force", "Forbidden", detail="may not be specified for non-apply patch")
        )
    if len(options["field_manager"]) > 128:
        errors.append(
            field_error("fieldManager", "Too long", detail="may not be more than 128 bytes")
        )
    errors += _dry_run_errors(options["dry_run"])
    if options["field_validation"] not in ("", *FIELD_VALIDATION):
        errors.append(
            not_supported("fieldValidation", options["field_validation"], ["", *FIELD_VALIDATION])
        )
    if errors:
        raise invalid(f"{_WRITE_VERBS[verb]}.meta.k8s.io", "", errors)
    return options


def _delete_options(query: Query, body: Any) -> dict[str, Any]:
    """``DeleteOptions``: from the body when there is one (the query is then ignored, as on the
    server), else from the query; then ``ValidateDeleteOptions``."""
    if isinstance(body, Mapping):
        grace = body.get("gracePeriodSeconds")
        preconditions = body.get("preconditions") or {}
        options: dict[str, Any] = {
            "grace_period_seconds": grace if isinstance(grace, int) else None,
            "precondition_uid": preconditions.get("uid"),
            "precondition_resource_version": preconditions.get("resourceVersion"),
            "orphan_dependents": body.get("orphanDependents"),
            "propagation_policy": body.get("propagationPolicy"),
            "dry_run": tuple(body.get("dryRun") or ()),
        }
    else:
        options = {
            "grace_period_seconds": _int(query, "gracePeriodSeconds"),
            "orphan_dependents": _bool(query, "orphanDependents"),
            "propagation_policy": _first(query, "propagationPolicy"),
            "dry_run": tuple(query.getall("dryRun", [])),
        }
    errors: list[str] = []
    policy = options["propagation_policy"]
    if options["orphan_dependents"] is not None and policy is not None:
        errors.append(
            field_error(
                "propagationPolicy",
                "Invalid value",
                policy,
                "orphanDependents and deletionPropagation cannot be both set",
            )
        )
    if policy is not None and policy not in PROPAGATION:
        errors.append(not_supported("propagationPolicy", policy, [*PROPAGATION, "nil"]))
    errors += _dry_run_errors(options["dry_run"])
    if errors:
        raise invalid("DeleteOptions.meta.k8s.io", "", errors)
    return options


def parse(verb: str, query: Query, body: Any = None) -> Options:
    """The options of a request with RBAC verb ``verb``; 400 or 422 as the server answers."""
    fields: dict[str, Any] = {}
    if verb in ("list", "watch", "deletecollection"):
        fields.update(_list_options(query))
    if verb in _WRITE_VERBS:
        fields.update(_write_options(verb, query))
    if verb in ("delete", "deletecollection"):
        fields.update(_delete_options(query, body))
    return Options(verb=verb, **fields)


# -- what one request collects while it is served -------------------------------------------

_options: contextvars.ContextVar[Options] = contextvars.ContextVar("k8s_options")
_warnings: contextvars.ContextVar[list[str]] = contextvars.ContextVar("k8s_warnings")


def begin_request() -> None:
    """Start collecting for a new request (the emulator calls it as a request comes in)."""
    _warnings.set([])
    _options.set(Options())


def set_options(options: Options) -> None:
    _options.set(options)


def current() -> Options:
    """The options of the request being served (defaults outside a request)."""
    return _options.get(Options())


def add_warning(text: str) -> None:
    """A warning for the response, as the server's ``warning.AddWarning`` (deduplicated)."""
    warnings = _warnings.get(None)
    if warnings is not None and text not in warnings:
        warnings.append(text)


def warning_headers() -> list[str]:
    """The ``Warning`` header values: ``299 - "text"``, quotes and backslashes escaped."""
    values = []
    for text in _warnings.get([]):
        escaped = text.replace("\\", "\\\\").replace('"', '\\"')
        values.append(f'299 - "{escaped}"')
    return values
