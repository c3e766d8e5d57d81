package dev.finishable.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.core.type.TypeReference;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * What the Python driver tells a read (data source options, checked there): the source's
 * declared schema and Spark reader options, where its coordinator is, and how many slots the read
 * stage has. Partition columns (``key=value`` directories below {@code root}) are read as strings
 * and cast by the Python side, as the Python reader's values are.
 */
final class ReadOptions implements Serializable {
    private static final long serialVersionUID = 1L;
    static final ObjectMapper JSON = new ObjectMapper();

    final String name;
    final String read;
    final int slots;
    final String endpoint;
    final String token;
    final String coordinator;
    final String format;
    final String root;
    final boolean skipUnreadable;
    final StructType dataSchema;
    final List<String> partitionColumns;
    final Map<String, String> sparkOptions;

    private ReadOptions(Map<String, String> options) {
        name = required(options, "name");
        read = required(options, "read");
        slots = Integer.parseInt(required(options, "slots"));
        endpoint = required(options, "endpoint");
        token = required(options, "token");
        coordinator = required(options, "coordinator");
        format = required(options, "format");
        root = required(options, "root");
        skipUnreadable = Boolean.parseBoolean(options.getOrDefault("skipUnreadable", "false"));
        try {
            partitionColumns = Collections.unmodifiableList(JSON.readValue(
                required(options, "partitionColumns"), new TypeReference<List<String>>() {}));
            sparkOptions = Collections.unmodifiableMap(JSON.readValue(
                required(options, "sparkOptions"), new TypeReference<LinkedHashMap<String, String>>() {}));
        } catch (java.io.IOException error) {
            throw new IllegalArgumentException("finishable read " + read + ": bad options: " + error, error);
        }
        StructType declared = (StructType) DataType.fromJson(required(options, "schema"));
        List<StructField> data = new ArrayList<>();
        for (StructField field : declared.fields()) {
            if (!partitionColumns.contains(field.name())) {
                data.add(new StructField(field.name(), field.dataType(), true, field.metadata()));
            }
        }
        dataSchema = new StructType(data.toArray(new StructField[0]));
    }

    /** Options as Spark hands them to a provider (its map may ignore case: copy the keys we know). */
    static ReadOptions of(Map<String, String> options) {
        Map<String, String> copy = new HashMap<>();
        for (String key : new String[] {"name", "read", "slots", "endpoint", "token", "coordinator",
                "format", "root", "skipUnreadable", "schema", "partitionColumns", "sparkOptions"}) {
            String value = options.get(key);
            if (value == null) {
                value = options.get(key.toLowerCase(java.util.Locale.ROOT));
            }
            if (value != null) {
                copy.put(key, value);
            }
        }
        return new ReadOptions(copy);
    }

    private static String required(Map<String, String> options, String key) {
        String value = options.get(key);
        if (value == null) {
            throw new IllegalArgumentException(
                "the finishable read source needs the option '" + key + "': declare reads with job.read()");
        }
        return value;
    }

    /** The partition columns, as strings. */
    StructType partitionSchema() {
        StructField[] fields = new StructField[partitionColumns.size()];
        for (int index = 0; index < fields.length; index++) {
            fields[index] = new StructField(partitionColumns.get(index), DataTypes.StringType, true,
                org.apache.spark.sql.types.Metadata.empty());
        }
        return new StructType(fields);
    }

    /** Data columns, then partition columns. */
    StructType outputSchema() {
        List<StructField> fields = new ArrayList<>(List.of(dataSchema.fields()));
        fields.addAll(List.of(partitionSchema().fields()));
        return new StructType(fields.toArray(new StructField[0]));
    }
}
