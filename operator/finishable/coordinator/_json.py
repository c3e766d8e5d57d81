"""Readers for fields of decoded JSON that name the bad field, so a 400 says what to fix."""

from __future__ import annotations

from typing import Any


class JsonFieldError(ValueError):
    """A JSON document lacks a field or has one of the wrong type; the message names the field."""


def as_object(value: object, where: str) -> dict[str, Any]:
    """``value`` as a JSON object, or an error naming ``where``."""
    if not isinstance(value, dict):
        raise JsonFieldError(f"{where}: expected a JSON object, got {_kind(value)}")
    return value


def get_int(obj: dict[str, Any], key: str, where: str, *, default: int | None = None) -> int:
    """An integer field (booleans are refused: JSON ``true`` is not a subtask number)."""
    if key not in obj:
        if default is not None:
            return default
        raise JsonFieldError(f"{where}.{key}: missing (expected an integer)")
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise JsonFieldError(f"{where}.{key}: expected an integer, got {_kind(value)}")
    return value


def _required(obj: dict[str, Any], key: str, where: str, kind: type, expected: str) -> Any:
    """A required field of one JSON type; the error names the field and what was expected."""
    if key not in obj:
        raise JsonFieldError(f"{where}.{key}: missing (expected {expected})")
    value = obj[key]
    if not isinstance(value, kind):
        raise JsonFieldError(f"{where}.{key}: expected {expected}, got {_kind(value)}")
    return value


def get_str(obj: dict[str, Any], key: str, where: str) -> str:
    """A required string field."""
    value: str = _required(obj, key, where, str, "a string")
    return value


def get_optional_str(obj: dict[str, Any], key: str, where: str) -> str | None:
    """A string field that may be absent or ``null``."""
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise JsonFieldError(f"{where}.{key}: expected a string or null, got {_kind(value)}")
    return value


def get_list(obj: dict[str, Any], key: str, where: str) -> list[Any]:
    """A required array field."""
    value: list[Any] = _required(obj, key, where, list, "an array")
    return value


def get_bool(obj: dict[str, Any], key: str, where: str) -> bool:
    """A required boolean field."""
    value: bool = _required(obj, key, where, bool, "true or false")
    return value


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"the string {shown!r}"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
