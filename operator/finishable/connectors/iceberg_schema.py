"""The shape of an Iceberg sink's table: partitioning as the user writes it, and schema checks.

A DataFrame is checked against an existing table before the query runs (names, types or a safe
promotion, nullability), so a mismatch is one clear error naming each column and both types,
never a failed commit minutes later; ``conform`` casts a batch's rows to the table's Arrow types
at commit time. No Spark and no catalog here: the rules are tested on their own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import pyarrow as pa

if TYPE_CHECKING:
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import Transform

_TRANSFORMS: Final = ("identity", "year", "month", "day", "hour", "bucket", "truncate")
_PARTITION = re.compile(r"^\s*([a-z]+)\s*\(\s*(?:(\d+)\s*,\s*)?([^(),]+?)\s*\)\s*$")


class IcebergConfigError(ValueError):
    """A user mistake in an Iceberg sink (table name, mode, partitioning, schema, catalog)."""


class IcebergSchemaError(IcebergConfigError):
    """The DataFrame does not fit the existing table; the message names every column concerned."""


@dataclass(frozen=True)
class PartitionField:
    """One entry of ``partition_by``: a transform of a source column."""

    source: str
    transform: str
    param: int | None = None

    def build(self) -> Transform[Any, Any]:
        from pyiceberg import transforms  # noqa: PLC0415 - optional dependency

        simple: dict[str, type[Transform[Any, Any]]] = {
            "identity": transforms.IdentityTransform,
            "year": transforms.YearTransform,
            "month": transforms.MonthTransform,
            "day": transforms.DayTransform,
            "hour": transforms.HourTransform,
        }
        if self.transform == "bucket":
            return transforms.BucketTransform(self.param or 0)
        if self.transform == "truncate":
            return transforms.TruncateTransform(self.param or 0)
        return simple[self.transform]()

    def key(self) -> tuple[str, str]:
        """How the table's own spec shows this field (to compare with an existing table)."""
        return self.source, str(self.build())


def parse_partition(entry: str) -> PartitionField:
    """``col``, ``identity(col)``, ``year|month|day|hour(col)``, ``bucket(N, col)`` or
    ``truncate(W, col)``."""
    accepted = (
        "use a column name, identity(col), year(col), month(col), day(col), hour(col), "
        "bucket(N, col) or truncate(W, col)"
    )
    if not isinstance(entry, str) or not entry.strip():
        raise IcebergConfigError(f"partition_by entry {entry!r}: {accepted}")
    text = entry.strip()
    if "(" not in text:
        return PartitionField(text, "identity")
    match = _PARTITION.fullmatch(text)
    if match is None or match.group(1) not in _TRANSFORMS:
        raise IcebergConfigError(f"partition_by entry {entry!r}: {accepted}")
    transform, number, source = match.group(1), match.group(2), match.group(3)
    needs_number = transform in ("bucket", "truncate")
    if needs_number != (number is not None) or (number is not None and int(number) < 1):
        raise IcebergConfigError(f"partition_by entry {entry!r}: {accepted}")
    return PartitionField(source, transform, int(number) if number is not None else None)


# --- schemas -------------------------------------------------------------------------------------


def check_schema(
    table_name: str, table_schema: Schema, frame: pa.Schema, shown: Mapping[str, str]
) -> None:
    """Refuse a DataFrame whose columns do not fit the table, naming each column concerned."""
    target = table_schema.as_arrow()
    problems: list[str] = []
    for field in table_schema.fields:
        if field.name not in frame.names:
            if field.required:
                problems.append(
                    f"column {field.name!r} ({field.field_type}) is required in the table but "
                    "missing from the DataFrame"
                )
            continue
        given = frame.field(field.name)
        if not compatible(given.type, target.field(field.name).type):
            problems.append(
                f"column {field.name!r}: the table has {field.field_type}, the DataFrame has "
                f"{shown.get(field.name, str(given.type))}"
            )
        elif field.required and given.nullable:
            problems.append(
                f"column {field.name!r}: required in the table, nullable in the DataFrame"
            )
    known = {f.name for f in table_schema.fields}
    for name in frame.names:
        if name not in known:
            problems.append(
                f"column {name!r} ({shown.get(name, str(frame.field(name).type))}) is not in the "
                f"table (its columns: {', '.join(sorted(known))})"
            )
    if problems:
        raise IcebergSchemaError(
            f"the DataFrame does not fit Iceberg table {table_name!r}: " + "; ".join(problems)
        )


def compatible(given: pa.DataType, wanted: pa.DataType) -> bool:
    """Whether values of ``given`` can be written as ``wanted`` without loss."""
    given, wanted = _plain(given), _plain(wanted)
    if given.equals(wanted):
        return True
    t = pa.types
    if t.is_integer(given) and t.is_signed_integer(wanted):
        return bool(t.is_signed_integer(given) and given.bit_width <= wanted.bit_width)
    if t.is_floating(given) and t.is_floating(wanted):
        return bool(given.bit_width <= wanted.bit_width)
    if t.is_decimal(given) and t.is_decimal(wanted):
        return bool(given.scale == wanted.scale and given.precision <= wanted.precision)
    if t.is_timestamp(given) and t.is_timestamp(wanted):
        return bool((given.tz is None) == (wanted.tz is None))
    if t.is_struct(given) and t.is_struct(wanted):
        names = {wanted.field(i).name: wanted.field(i).type for i in range(wanted.num_fields)}
        return all(
            given.field(i).name in names
            and compatible(given.field(i).type, names[given.field(i).name])
            for i in range(given.num_fields)
        )
    if t.is_list(given) and t.is_list(wanted):
        return compatible(given.value_type, wanted.value_type)
    if t.is_map(given) and t.is_map(wanted):
        return compatible(given.key_type, wanted.key_type) and compatible(
            given.item_type, wanted.item_type
        )
    return False


def _plain(kind: pa.DataType) -> pa.DataType:
    t = pa.types
    if t.is_large_string(kind) or t.is_string_view(kind):
        return pa.string()
    if t.is_large_binary(kind) or t.is_binary_view(kind):
        return pa.binary()
    if t.is_large_list(kind):
        return pa.list_(kind.value_type)
    return kind


def conform(data: pa.Table, table_schema: Schema) -> pa.Table:
    """``data`` in the table's column order and Arrow types; absent optional columns as nulls."""
    target = table_schema.as_arrow()
    columns = []
    for field in target:
        if field.name in data.column_names:
            columns.append(data.column(field.name).cast(field.type))
        else:
            columns.append(pa.nulls(data.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=target)
