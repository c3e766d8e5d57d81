package dev.finishable.spark;

import java.io.Serializable;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Drain sentinels as a sink recognises them (connectors/sentinels.py is the one definition): a
 * row is one if its marker column is true (not null, for a marker of another type), or a
 * top-level timestamp (or one of a top-level struct's, such as {@code window}) is the sentinel's
 * event time, or a top-level string is the sentinel's text. The marker column is never written.
 */
final class Sentinels implements Serializable {
    private static final long serialVersionUID = 1L;
    static final String COLUMN = "__finishable_sentinel";
    static final long EVENT_TIME_MICROS = Instant.parse("9990-01-01T00:00:00Z").getEpochSecond() * 1_000_000L;
    static final UTF8String TEXT = UTF8String.fromString("\u0000finishable-sentinel");

    private final StructType schema;
    private final int marker;

    Sentinels(StructType schema) {
        this.schema = schema;
        this.marker = List.of(schema.fieldNames()).indexOf(COLUMN);
    }

    /** The columns a sink writes: all but the marker. */
    static StructType written(StructType schema) {
        List<StructField> kept = new ArrayList<>();
        for (StructField field : schema.fields()) {
            if (!field.name().equals(COLUMN)) {
                kept.add(field);
            }
        }
        return new StructType(kept.toArray(new StructField[0]));
    }

    boolean isSentinel(InternalRow row) {
        StructField[] fields = schema.fields();
        for (int index = 0; index < fields.length; index++) {
            if (row.isNullAt(index)) {
                continue;
            }
            DataType type = fields[index].dataType();
            if (index == marker) {
                if (!(type instanceof BooleanType) || row.getBoolean(index)) {
                    return true;
                }
            } else if (type instanceof StringType) {
                if (TEXT.equals(row.getUTF8String(index))) {
                    return true;
                }
            } else if (isTimestamp(type)) {
                if (row.getLong(index) == EVENT_TIME_MICROS) {
                    return true;
                }
            } else if (type instanceof StructType struct && hasSentinelTime(row.getStruct(index, struct.size()), struct)) {
                return true;
            }
        }
        return false;
    }

    /** The row without the marker column (the row itself when there is none). */
    InternalRow withoutMarker(InternalRow row) {
        if (marker < 0) {
            return row;
        }
        StructField[] fields = schema.fields();
        Object[] values = new Object[fields.length - 1];
        for (int index = 0, out = 0; index < fields.length; index++) {
            if (index != marker) {
                values[out++] = row.isNullAt(index) ? null : row.get(index, fields[index].dataType());
            }
        }
        return new GenericInternalRow(values);
    }

    private static boolean hasSentinelTime(InternalRow struct, StructType type) {
        StructField[] fields = type.fields();
        for (int index = 0; index < fields.length; index++) {
            if (isTimestamp(fields[index].dataType()) && !struct.isNullAt(index)
                    && struct.getLong(index) == EVENT_TIME_MICROS) {
                return true;
            }
        }
        return false;
    }

    private static boolean isTimestamp(DataType type) {
        return type instanceof TimestampType || type instanceof TimestampNTZType;
    }
}
