"""Durations ("500ms", "30s", "5m", "1h") and quantities ("512Ki", "1Mi", "2g") as typed values.

Manifests carry them as strings, the way Kubernetes and Spark users write them; the code works
with a ``timedelta`` and a byte count. Parse errors quote the bad value and say what is accepted.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any, ClassVar

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

_DURATION_UNITS_MS: dict[str, int] = {
    "ms": 1,
    "s": 1_000,
    "m": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_DURATION_WHOLE = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+")

# Binary suffixes (Kubernetes), decimal suffixes (Kubernetes) and Spark's lowercase ones, which
# Spark reads as binary: spark.executor.memory=2g means 2 GiB.
_QUANTITY_FACTORS: dict[str, int] = {
    "": 1,
    "Ki": 1024,
    "Mi": 1024**2,
    "Gi": 1024**3,
    "Ti": 1024**4,
    "Pi": 1024**5,
    "k": 1000,
    "K": 1000,
    "M": 1000**2,
    "G": 1000**3,
    "T": 1000**4,
    "P": 1000**5,
    "b": 1,
    "kb": 1024,
    "m": 1024**2,
    "mb": 1024**2,
    "g": 1024**3,
    "gb": 1024**3,
    "t": 1024**4,
    "tb": 1024**4,
}
_QUANTITY = re.compile(r"(\d+(?:\.\d+)?)\s*(Ki|Mi|Gi|Ti|Pi|k|K|M|G|T|P|kb|mb|gb|tb|b|m|g|t|)")

DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h|d))+$"
QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|k|K|M|G|T|P|kb|mb|gb|tb|b|m|g|t)?$"

DURATION_HELP = "a number followed by ms, s, m, h or d, such as 500ms, 30s, 5m, 1h or 1h30m"
QUANTITY_HELP = (
    "a byte count with an optional suffix: Ki, Mi, Gi, Ti (binary), k, M, G, T (decimal) "
    "or Spark's k, m, g, t (binary), such as 512Ki, 1Mi, 10Gi or 2g"
)


class _WrittenAsString:
    """Pydantic support for a unit type: parsed from its user-facing string, dumped as one."""

    json_schema_extra: ClassVar[dict[str, Any]]

    @classmethod
    def parse(cls, value: object) -> Any:
        raise NotImplementedError

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source_type: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            cls.parse,
            serialization=core_schema.plain_serializer_function_ser_schema(
                str, return_schema=core_schema.str_schema()
            ),
        )

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return dict(cls.json_schema_extra)


class Duration(_WrittenAsString, timedelta):
    """A span of time parsed from text such as ``"30s"``; ``str()`` gives canonical text back."""

    json_schema_extra: ClassVar[dict[str, Any]] = {
        "type": "string",
        "pattern": DURATION_PATTERN,
    }

    @classmethod
    def parse(cls, value: object) -> Duration:
        """Parse ``value``; raise ``ValueError`` quoting it when it is not a duration."""
        if isinstance(value, Duration):
            return value
        if isinstance(value, timedelta):
            return cls(seconds=value.total_seconds())
        if not isinstance(value, str) or isinstance(value, bool):
            raise ValueError(f"{value!r} is not a duration: write it as a string, {DURATION_HELP}")
        text = value.strip()
        if not _DURATION_WHOLE.fullmatch(text):
            raise ValueError(f"{value!r} is not a duration: use {DURATION_HELP}")
        millis = 0.0
        for number, unit in _DURATION_PART.findall(text):
            millis += float(number) * _DURATION_UNITS_MS[unit]
        return cls(milliseconds=round(millis))

    @property
    def seconds_float(self) -> float:
        """The duration in seconds, the unit ``time.sleep`` and timeouts take."""
        return self.total_seconds()

    def __str__(self) -> str:
        millis = round(self.total_seconds() * 1000)
        if millis == 0:
            return "0s"
        parts: list[str] = []
        for unit in ("d", "h", "m", "s"):
            size = _DURATION_UNITS_MS[unit]
            if millis >= size and (unit != "d" or millis % size == 0):
                count, millis = divmod(millis, size)
                parts.append(f"{count}{unit}")
        if millis:
            parts.append(f"{millis}ms")
        return "".join(parts)

    def __repr__(self) -> str:
        return f"Duration({str(self)!r})"


def positive(value: Duration) -> Duration:
    """A duration that must be longer than zero (an interval, a timeout), or a clear error."""
    if value.total_seconds() <= 0:
        raise ValueError(f"must be longer than zero, got {str(value)!r}")
    return value


class Quantity(_WrittenAsString, int):
    """A byte count parsed from text such as ``"2g"`` or ``"512Mi"``; an ``int`` of bytes."""

    json_schema_extra: ClassVar[dict[str, Any]] = {
        "type": "string",
        "pattern": QUANTITY_PATTERN,
    }

    @classmethod
    def parse(cls, value: object) -> Quantity:
        """Parse ``value``; raise ``ValueError`` quoting it when it is not a quantity."""
        if isinstance(value, Quantity):
            return value
        if isinstance(value, bool):
            raise ValueError(f"{value!r} is not a quantity: use {QUANTITY_HELP}")
        if isinstance(value, int):
            if value < 0:
                raise ValueError(f"{value!r} is not a quantity: it must not be negative")
            return cls(value)
        if not isinstance(value, str):
            raise ValueError(f"{value!r} is not a quantity: use {QUANTITY_HELP}")
        match = _QUANTITY.fullmatch(value.strip())
        if not match:
            raise ValueError(f"{value!r} is not a quantity: use {QUANTITY_HELP}")
        number, suffix = match.groups()
        return cls(round(float(number) * _QUANTITY_FACTORS[suffix]))

    def __str__(self) -> str:
        """Canonical Kubernetes form: the largest binary suffix that divides exactly."""
        for suffix in ("Pi", "Ti", "Gi", "Mi", "Ki"):
            size = _QUANTITY_FACTORS[suffix]
            if self and self % size == 0:
                return f"{int(self) // size}{suffix}"
        return str(int(self))

    def __repr__(self) -> str:
        return f"Quantity({str(self)!r})"

    def spark_memory(self) -> str:
        """Spark's memory syntax (``spark.driver.memory``): whole mebibytes, at least one."""
        mebibytes = max(1, -(-int(self) // 1024**2))
        if mebibytes % 1024 == 0:
            return f"{mebibytes // 1024}g"
        return f"{mebibytes}m"
