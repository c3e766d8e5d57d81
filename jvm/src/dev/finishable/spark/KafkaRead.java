package dev.finishable.spark;

import java.io.IOException;
import java.util.EnumSet;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;

import com.fasterxml.jackson.core.type.TypeReference;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A streaming read of a {@code sources.Kafka} source by Kafka's Java consumer: the coordinator
 * cuts each partition's offsets into splits, {@link SplitStream} carries a batch's splits in its
 * offset, and {@link KafkaSplitReader} reads them on executors, so the records never cross into
 * Python. The options are connectors/jvm.py's {@code jvm_kafka_stream_options}.
 */
public final class KafkaRead implements TableProvider {
    private static final String WHAT = "the finishable Kafka read (declare sources with sources.Kafka)";
    private static final String[] KEYS = {"name", "schema", "consumer", "failOnDataLoss", "readTimeoutMs"};

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return schema(ReadOptions.known(options, KEYS));
    }

    @Override
    public boolean supportsExternalMetadata() {
        return false;
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        Map<String, String> own = ReadOptions.known(properties, KEYS);
        StreamOptions stream = new StreamOptions(ReadOptions.known(properties, StreamOptions.KEYS), WHAT);
        Map<String, String> consumer;
        try {
            consumer = ReadOptions.JSON.readValue(ReadOptions.required(own, "consumer", WHAT),
                new TypeReference<LinkedHashMap<String, String>>() {});
        } catch (IOException error) {
            throw new IllegalArgumentException(WHAT + ": the option 'consumer' is not a JSON object: " + error, error);
        }
        KafkaSplitReader reader = new KafkaSplitReader(consumer,
            Boolean.parseBoolean(own.getOrDefault("failOnDataLoss", "true")),
            Long.parseLong(own.getOrDefault("readTimeoutMs", "120000")));
        return new KafkaTable(own.getOrDefault("name", "finishable_stream__" + stream.coordinator), schema(own),
            stream, reader);
    }

    private static StructType schema(Map<String, String> options) {
        return (StructType) DataType.fromJson(ReadOptions.required(options, "schema", WHAT));
    }

    private static final class KafkaTable implements Table, SupportsRead, ScanBuilder, Scan {
        private final String name;
        private final StructType schema;
        private final StreamOptions stream;
        private final KafkaSplitReader reader;

        KafkaTable(String name, StructType schema, StreamOptions stream, KafkaSplitReader reader) {
            this.name = name;
            this.schema = schema;
            this.stream = stream;
            this.reader = reader;
        }

        @Override
        public String name() {
            return name;
        }

        @Override
        @SuppressWarnings("deprecation")  // columns() derives from it; Spark 4 still calls it
        public StructType schema() {
            return schema;
        }

        @Override
        public Set<TableCapability> capabilities() {
            return EnumSet.of(TableCapability.MICRO_BATCH_READ);
        }

        @Override
        public ScanBuilder newScanBuilder(CaseInsensitiveStringMap ignored) {
            return this;
        }

        @Override
        public Scan build() {
            return this;
        }

        @Override
        public StructType readSchema() {
            return schema;
        }

        @Override
        public String description() {
            return "finishable Kafka read " + stream.coordinator;
        }

        @Override
        public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
            return new SplitStream(stream, reader, schema);
        }
    }
}
