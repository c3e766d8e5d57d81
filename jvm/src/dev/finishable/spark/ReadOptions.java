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
    private static final String WHAT = "the finishable read source (declare reads with job.read())";

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
    /** Hadoop settings for the source's store (S3's endpoint and keys; connectors/jvm.py). */
    final Map<String, String> hadoopConf;
    /** Streaming: the run's attempt and how a batch's splits make tasks. */
    final StreamOptions stream;

    private ReadOptions(Map<String, String> options) {
        coordinator = required(options, "coordinator");
        name = options.getOrDefault("name", "finishable_stream__" + coordinator);
        read = options.getOrDefault("read", coordinator);
        slots = Integer.parseInt(options.getOrDefault("slots", "0"));
        stream = new StreamOptions(options, WHAT);
        endpoint = required(options, "endpoint");
        token = required(options, "token");
        format = required(options, "format");
        root = required(options, "root");
        skipUnreadable = Boolean.parseBoolean(options.getOrDefault("skipUnreadable", "false"));
        try {
            partitionColumns = Collections.unmodifiableList(JSON.readValue(
                required(options, "partitionColumns"), new TypeReference<List<String>>() {}));
            sparkOptions = Collections.unmodifiableMap(JSON.readValue(
                required(options, "sparkOptions"), new TypeReference<LinkedHashMap<String, String>>() {}));
            hadoopConf = Collections.unmodifiableMap(JSON.readValue(
                options.getOrDefault("hadoopConf", "{}"), new TypeReference<LinkedHashMap<String, String>>() {}));
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

    /** Options as Spark hands them to a provider. */
    static ReadOptions of(Map<String, String> options) {
        return new ReadOptions(known(options, "name", "read", "slots", "endpoint", "token", "coordinator",
            "format", "root", "skipUnreadable", "schema", "partitionColumns", "sparkOptions", "hadoopConf",
            "attempt", "maxSplitsPerBatch", "maxPartitionWeight", "openCost", "minPartitions", "splitSize"));
    }

    /** The {@code keys} given in {@code options}, spelt as here: Spark's map may ignore case, or
     * hand the keys lower-cased. */
    static Map<String, String> known(Map<String, String> options, String... keys) {
        Map<String, String> copy = new HashMap<>();
        for (String key : keys) {
            String value = options.get(key);
            if (value == null) {
                value = options.get(key.toLowerCase(java.util.Locale.ROOT));
            }
            if (value != null) {
                copy.put(key, value);
            }
        }
        return copy;
    }

    private static String required(Map<String, String> options, String key) {
        return required(options, key, WHAT);
    }

    /** An option the Python side always sets; its absence is a bug, named. */
    static String required(Map<String, String> options, String key, String what) {
        String value = options.get(key);
        if (value == null) {
            throw new IllegalArgumentException(what + " needs the option '" + key + "'");
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
        return withPartitions(dataSchema);
    }

    /** {@code data}'s columns, then the partition columns: the rows the format reader gives. */
    StructType withPartitions(StructType data) {
        List<StructField> fields = new ArrayList<>(List.of(data.fields()));
        fields.addAll(List.of(partitionSchema().fields()));
        return new StructType(fields.toArray(new StructField[0]));
    }
}
