package dev.finishable.spark;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadAllAvailable;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxBytes;
import org.apache.spark.sql.connector.read.streaming.ReadMaxFiles;
import org.apache.spark.sql.connector.read.streaming.SupportsAdmissionControl;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A streaming read whose splits come from the driver's coordinator and whose rows never leave the
 * JVM: a {@code sources.Files} source read by Spark's own file readers, a {@code sources.Kafka}
 * source by the Kafka consumer ({@link SplitRows}). It is the JVM twin of
 * {@code FinishableStreamReader} (connectors/streaming/source.py). Offsets are the Python
 * reader's, byte for byte in meaning ({@code {"format": "finishable.splits", "version": 1,
 * "coordinator", "seq", "attempt", "splits"}}): each batch's splits are asked from the
 * coordinator when Spark plans it and carried in its offset, so a stop, a savepoint or a drain
 * cuts at that boundary and a checkpoint written by either reader is read by the other.
 */
final class SplitStream implements MicroBatchStream, SupportsAdmissionControl, SupportsTriggerAvailableNow {
    static final String OFFSET_FORMAT = "finishable.splits";
    static final int OFFSET_VERSION = 1;
    static final int ALL_AVAILABLE_CAP = 10_000;
    static final int MAX_SPLITS_PER_REQUEST = 100_000;
    private static final int READER_SUBTASK = 0;

    private final StreamOptions options;
    private final SplitRows splitReader;
    private final StructType readSchema;
    private final DriverCalls driver;
    private Integer attempt;

    SplitStream(StreamOptions options, SplitRows splitReader, StructType readSchema) {
        this.options = options;
        this.splitReader = splitReader;
        this.readSchema = readSchema;
        this.driver = new DriverCalls(options.endpoint, options.token);
    }

    /** What Spark's progress reports and UI name the source by: its coordinator and reader. */
    @Override
    public String toString() {
        return "finishable " + options.coordinator + " (" + splitReader.getClass().getSimpleName() + ")";
    }

    @Override
    public Offset initialOffset() {
        return new SplitOffset(options.coordinator, 0, null, ReadOptions.JSON.createArrayNode());
    }

    @Override
    public Offset deserializeOffset(String json) {
        return SplitOffset.parse(json, options.coordinator);
    }

    @Override
    public void commit(Offset end) {
        // Not 'batch complete' (docs/architecture.md, PySpark facts): the driver finishes splits.
    }

    @Override
    public void stop() {
    }

    @Override
    public ReadLimit getDefaultReadLimit() {
        return ReadLimit.maxFiles(options.maxSplitsPerBatch);
    }

    @Override
    public void prepareForTriggerAvailableNow() {
        // The coordinator decides what exists; an empty answer ends an availableNow run.
    }

    @Override
    public Offset latestOffset() {
        throw new UnsupportedOperationException("latestOffset(start, limit) plans finishable batches");
    }

    @Override
    public Offset latestOffset(Offset startOffset, ReadLimit limit) {
        SplitOffset start = SplitOffset.parse(startOffset.json(), options.coordinator);
        int run = runAttempt();
        ObjectNode event = ReadOptions.JSON.createObjectNode();
        event.put("type", "RequestSplit");
        event.put("subtask", READER_SUBTASK);
        event.put("attempt", run);
        event.put("max_splits", maxSplits(limit));
        ArrayNode splits = ReadOptions.JSON.createArrayNode();
        for (JsonNode answer : driver.coordinatorEvent(options.coordinator, READER_SUBTASK, run, event)) {
            if ("AddSplits".equals(answer.path("type").asText())) {
                answer.path("splits").forEach(splits::add);
            }
        }
        if (splits.isEmpty()) {
            return startOffset;
        }
        return new SplitOffset(options.coordinator, start.seq + 1, run, splits);
    }

    /** How many splits one batch may take under Spark's read limit (max_splits_for). */
    private int maxSplits(ReadLimit limit) {
        long wanted = options.maxSplitsPerBatch;
        if (limit instanceof ReadAllAvailable) {
            wanted = ALL_AVAILABLE_CAP;
        } else if (limit instanceof ReadMaxFiles) {
            wanted = ((ReadMaxFiles) limit).maxFiles();
        } else if (limit instanceof ReadMaxBytes && options.splitSize > 0) {
            wanted = ((ReadMaxBytes) limit).maxBytes() / options.splitSize;
        }
        return (int) Math.max(1, Math.min(wanted, MAX_SPLITS_PER_REQUEST));
    }

    /** The query run's attempt: pinned in the options, or the one the driver made ready. */
    private int runAttempt() {
        if (attempt == null) {
            attempt = options.attempt >= 0 ? options.attempt : liveAttempt(driver, options.coordinator);
        }
        return attempt;
    }

    /** The one attempt the driver made ready for this query run (resolve_attempt). */
    static int liveAttempt(DriverCalls driver, String coordinator) {
        JsonNode live = driver.progress(coordinator).path("live_attempts").path(Integer.toString(READER_SUBTASK));
        if (!live.isArray() || live.size() != 1) {
            throw new IllegalStateException("coordinator '" + coordinator + "' has live attempts " + live
                + " for the reader; the driver must make exactly one attempt ready before the query "
                + "starts (SourceCoordinator.begin_run)");
        }
        return live.get(0).asInt();
    }

    @Override
    public InputPartition[] planInputPartitions(Offset startOffset, Offset endOffset) {
        SplitOffset start = SplitOffset.parse(startOffset.json(), options.coordinator);
        SplitOffset end = SplitOffset.parse(endOffset.json(), options.coordinator);
        if (end.seq == start.seq) {
            return new InputPartition[0];
        }
        List<InputPartition> partitions = new ArrayList<>();
        for (List<JsonNode> group : groups(end.splits)) {
            String[] texts = new String[group.size()];
            for (int index = 0; index < texts.length; index++) {
                texts[index] = group.get(index).toString();
            }
            // This run's attempt, for skip reports (a replayed batch was planned by an older one).
            partitions.add(new SplitsPartition(texts, attempt == null ? options.attempt : attempt));
        }
        return partitions.toArray(new InputPartition[0]);
    }

    /** Spark's file source grouping (group_splits): a group closes once it reaches the target. */
    private List<List<JsonNode>> groups(ArrayNode splits) {
        long total = 0;
        List<Long> weights = new ArrayList<>();
        for (JsonNode split : splits) {
            long weight = weight(split) + options.openCost;
            weights.add(weight);
            total += weight;
        }
        long perCore = (total + Math.max(1, options.minPartitions) - 1) / Math.max(1, options.minPartitions);
        long target = Math.max(1, Math.min(options.maxPartitionWeight, Math.max(options.openCost, perCore)));
        List<List<JsonNode>> groups = new ArrayList<>();
        List<JsonNode> current = new ArrayList<>();
        long weight = 0;
        for (int index = 0; index < splits.size(); index++) {
            long next = weights.get(index);
            if (!current.isEmpty() && weight + next > options.maxPartitionWeight) {
                groups.add(current);
                current = new ArrayList<>();
                weight = 0;
            }
            current.add(splits.get(index));
            weight += next;
            if (weight >= target) {
                groups.add(current);
                current = new ArrayList<>();
                weight = 0;
            }
        }
        if (!current.isEmpty()) {
            groups.add(current);
        }
        return groups;
    }

    /** The cost of reading a split (split_weight): bytes of a file range, offsets of a Kafka one. */
    static long weight(JsonNode split) {
        switch (split.path("kind").asText()) {
            case "file":
                return split.path("length").asLong();
            case "kafka":
                return split.path("end").asLong() - split.path("start").asLong();
            default:
                return 1;
        }
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return new Factory(options, splitReader, readSchema);
    }

    /** One task's splits, carried whole to the executor. */
    static final class SplitsPartition implements InputPartition {
        private static final long serialVersionUID = 1L;
        final String[] splits;
        final int attempt;

        SplitsPartition(String[] splits, int attempt) {
            this.splits = splits.clone();
            this.attempt = attempt;
        }
    }

    private static final class Factory implements PartitionReaderFactory {
        private static final long serialVersionUID = 1L;
        private final StreamOptions options;
        private final SplitRows splitReader;
        private final StructType readSchema;

        Factory(StreamOptions options, SplitRows splitReader, StructType readSchema) {
            this.options = options;
            this.splitReader = splitReader;
            this.readSchema = readSchema;
        }

        @Override
        public PartitionReader<InternalRow> createReader(InputPartition partition) {
            SplitsPartition splits = (SplitsPartition) partition;
            DriverCalls driver = new DriverCalls(options.endpoint, options.token);
            List<Iterator<InternalRow>> parts = new ArrayList<>();
            for (String text : splits.splits) {
                JsonNode split;
                try {
                    split = ReadOptions.JSON.readTree(text);
                } catch (IOException error) {
                    throw new IllegalStateException("a split of the batch is not JSON: " + error, error);
                }
                String kind = split.path("kind").asText();
                if ("sentinel".equals(kind)) {
                    parts.add(List.<InternalRow>of(sentinelRow(split.path("row"), readSchema)).iterator());
                } else {
                    parts.add(splitReader.rows(split, (id, reason) -> {
                        ObjectNode event = ReadOptions.JSON.createObjectNode();
                        event.put("type", "SplitSkipped");
                        event.put("split_id", id);
                        event.put("reason", reason);
                        int run = splits.attempt >= 0 ? splits.attempt : liveAttempt(driver, options.coordinator);
                        driver.coordinatorEvent(options.coordinator, READER_SUBTASK, run, event);
                    }));
                }
            }
            Iterator<InternalRow> rows = SplitReader.concat(parts);
            return new PartitionReader<InternalRow>() {
                private InternalRow current;

                @Override
                public boolean next() {
                    if (!rows.hasNext()) {
                        return false;
                    }
                    current = rows.next();
                    return true;
                }

                @Override
                public InternalRow get() {
                    return current;
                }

                @Override
                public void close() {
                }
            };
        }
    }

    /** A drain's sentinel row (sources.sentinel_row: timestamps in microseconds, dates in days),
     * in the read schema; partition columns, read as text, get the value's text. */
    static InternalRow sentinelRow(JsonNode row, StructType schema) {
        StructField[] fields = schema.fields();
        Object[] values = new Object[fields.length];
        for (int index = 0; index < fields.length; index++) {
            JsonNode value = row.path(fields[index].name());
            values[index] = value.isMissingNode() || value.isNull() ? null : typed(value, fields[index]);
        }
        return new GenericInternalRow(values);
    }

    private static Object typed(JsonNode value, StructField field) {
        DataType type = field.dataType();
        if (type instanceof StringType) {
            return UTF8String.fromString(value.asText());
        } else if (type instanceof BooleanType) {
            return value.asBoolean();
        } else if (type instanceof ByteType) {
            return (byte) value.asInt();
        } else if (type instanceof ShortType) {
            return (short) value.asInt();
        } else if (type instanceof IntegerType || type instanceof DateType) {
            return value.asInt();
        } else if (type instanceof LongType || type instanceof TimestampType || type instanceof TimestampNTZType) {
            return value.asLong();
        } else if (type instanceof FloatType) {
            return (float) value.asDouble();
        } else if (type instanceof DoubleType) {
            return value.asDouble();
        } else if (type instanceof DecimalType) {
            DecimalType decimal = (DecimalType) type;
            return Decimal.apply(value.decimalValue().setScale(decimal.scale(), java.math.RoundingMode.HALF_UP),
                decimal.precision(), decimal.scale());
        }
        throw new IllegalStateException("a sentinel row cannot give column " + field.name() + " of type "
            + type.simpleString() + " a value");
    }

    /** A source offset: a batch sequence number and the splits that batch reads. */
    static final class SplitOffset extends Offset {
        final String coordinator;
        final long seq;
        final Integer attempt;
        final ArrayNode splits;

        SplitOffset(String coordinator, long seq, Integer attempt, ArrayNode splits) {
            this.coordinator = coordinator;
            this.seq = seq;
            this.attempt = attempt;
            this.splits = splits;
        }

        @Override
        public String json() {
            ObjectNode document = ReadOptions.JSON.createObjectNode();
            document.put("format", OFFSET_FORMAT);
            document.put("version", OFFSET_VERSION);
            document.put("coordinator", coordinator);
            document.put("seq", seq);
            if (attempt == null) {
                document.putNull("attempt");
            } else {
                document.put("attempt", attempt);
            }
            document.set("splits", splits);
            return document.toString();
        }

        static SplitOffset parse(String json, String coordinator) {
            JsonNode document;
            try {
                document = ReadOptions.JSON.readTree(json);
            } catch (IOException error) {
                throw new IllegalArgumentException("offset is not JSON: " + error);
            }
            if (document == null || !OFFSET_FORMAT.equals(document.path("format").asText())) {
                throw new IllegalArgumentException("not a finishable source offset: " + json);
            }
            if (document.path("version").asInt() != OFFSET_VERSION) {
                throw new IllegalArgumentException("offset version " + document.path("version")
                    + "; this reader knows " + OFFSET_VERSION);
            }
            String name = document.path("coordinator").asText("");
            if (!name.equals(coordinator)) {
                throw new IllegalArgumentException("the offset belongs to source '" + name + "', not '"
                    + coordinator + "': is the checkpoint location shared by two queries, or was the "
                    + "source renamed?");
            }
            JsonNode attempt = document.path("attempt");
            JsonNode splits = document.path("splits");
            return new SplitOffset(name, document.path("seq").asLong(),
                attempt.isNull() || attempt.isMissingNode() ? null : attempt.asInt(),
                splits.isArray() ? (ArrayNode) splits : ReadOptions.JSON.createArrayNode());
        }
    }
}
