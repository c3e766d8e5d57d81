package dev.finishable.spark;

import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.spark.TaskContext;
import org.apache.spark.paths.SparkPath;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.execution.datasources.PartitionedFile;
import org.apache.spark.unsafe.types.UTF8String;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import scala.Function1;

/**
 * A reader slot on an executor: it becomes subtask {@code tasks[slot]} of the round, pulls splits
 * one at a time from the driver's coordinator up to the round's quota, reads each with Spark's
 * format reader, and tells the driver when it read its whole share ({@code task-read}). The same
 * protocol as BatchSourceReader.read in connectors/batch/datasources.py, step for step.
 */
final class SlotReader implements PartitionReader<InternalRow> {
    static final String ROUND_PROPERTY = "finishable.round";
    static final String AUDIT_ENV = "FINISHABLE_SPLIT_AUDIT";
    private static final String HIVE_NULL = "__HIVE_DEFAULT_PARTITION__";
    private static final Logger LOG = LoggerFactory.getLogger(SlotReader.class);

    private final ReadOptions options;
    private final Function1<PartitionedFile, scala.collection.Iterator<InternalRow>> formatReader;
    private final int slot;
    private final DriverCalls driver;

    private JsonNode round;
    private int subtask;
    private int attempt;
    private int quota;
    private int read;
    private boolean started;
    private boolean noMoreSplits;
    private boolean done;
    private Iterator<InternalRow> rows;
    private InternalRow current;

    SlotReader(ReadOptions options,
            Function1<PartitionedFile, scala.collection.Iterator<InternalRow>> formatReader, int slot) {
        this.options = options;
        this.formatReader = formatReader;
        this.slot = slot;
        this.driver = new DriverCalls(options.endpoint, options.token);
    }

    @Override
    public boolean next() {
        if (!started) {
            started = true;
            done = !begin();
        }
        while (!done) {
            if (rows != null && rows.hasNext()) {
                current = rows.next();
                return true;
            }
            rows = null;
            if (noMoreSplits || read >= quota) {
                // Only here, once Spark asked for more after the last row: the whole share was
                // read. A task cancelled mid-read never gets here, and the driver refuses what
                // its writer saw as the end of its input.
                ObjectNode body = taskBody();
                body.put("splits", read);
                driver.runtime("task-read", body);
                done = true;
                break;
            }
            List<JsonNode> splits = requestSplit();
            if (splits.isEmpty()) {
                if (noMoreSplits) {
                    continue;
                }
                // Suspended: the task ends (failing it would make Spark cancel the tasks still
                // running) without reporting its share read, so the driver commits none of it.
                LOG.info("read {} is suspended: subtask {} stops", options.read, subtask);
                done = true;
                break;
            }
            read += splits.size();
            rows = readSplits(splits);
        }
        return false;
    }

    @Override
    public InternalRow get() {
        return current;
    }

    @Override
    public void close() {
        rows = null;
    }

    /** The round's task for this slot, started on the driver; false when there is nothing to do. */
    private boolean begin() {
        TaskContext context = TaskContext.get();
        String raw = context == null ? null : context.getLocalProperty(ROUND_PROPERTY);
        if (raw == null || raw.isEmpty()) {
            throw new BatchTaskError("this task runs outside a finishable batch round: run Batch "
                + "DataFrames through job.stage()/job.write() and job.run(), not with actions of their own");
        }
        try {
            round = ReadOptions.JSON.readTree(raw);
        } catch (IOException error) {
            throw new BatchTaskError("the round property is not JSON: " + error);
        }
        JsonNode tasks = round.path("tasks");
        if (slot >= tasks.size()) {
            return false;
        }
        subtask = tasks.get(slot).asInt();
        int taskAttempt = Math.min(context.attemptNumber(), 9);
        attempt = (round.path("attempt").asInt() * 100_000 + round.path("round").asInt()) * 10 + taskAttempt;
        quota = Math.max(1, round.path("quota").asInt());
        JsonNode started = driver.runtime("task-start", taskBody());
        // Spark re-ran a task whose output the driver already committed: read nothing.
        return !started.path("committed").asBoolean(false);
    }

    private ObjectNode taskBody() {
        ObjectNode body = ReadOptions.JSON.createObjectNode();
        body.put("stage", round.path("stage").asText());
        body.put("task", subtask);
        body.put("attempt", attempt);
        return body;
    }

    private List<JsonNode> requestSplit() {
        ObjectNode event = ReadOptions.JSON.createObjectNode();
        event.put("type", "RequestSplit");
        event.put("subtask", subtask);
        event.put("attempt", attempt);
        event.put("max_splits", 1);
        List<JsonNode> splits = new ArrayList<>();
        for (JsonNode answer : driver.coordinatorEvent(options.coordinator, subtask, attempt, event)) {
            String type = answer.path("type").asText();
            if ("NoMoreSplits".equals(type)) {
                noMoreSplits = true;
            } else if ("AddSplits".equals(type)) {
                answer.path("splits").forEach(splits::add);
            }
        }
        return splits;
    }

    private Iterator<InternalRow> readSplits(List<JsonNode> splits) {
        List<Iterator<InternalRow>> parts = new ArrayList<>();
        for (JsonNode split : splits) {
            if (!"file".equals(split.path("kind").asText())) {
                throw new BatchTaskError("the JVM file reader of read " + options.read
                    + " got a split of kind " + split.path("kind").asText() + "; it reads file splits only");
            }
            audit(split.path("id").asText());
            parts.add(readSplit(split));
        }
        return parts.size() == 1 ? parts.get(0) : concat(parts);
    }

    /** One split's rows. With skipping on, the split is read whole before any row goes out, so a
     * skipped split leaves no partial rows behind and a replay reads exactly the same rows. */
    private Iterator<InternalRow> readSplit(JsonNode split) {
        String url = split.path("url").asText();
        long start = split.path("start").asLong();
        long length = split.path("length").asLong();
        long size = split.path("file_size").asLong();
        String described = start == 0 && length == size ? url
            : url + " bytes [" + start + ", " + (start + length) + ")";
        PartitionedFile file = PartitionedFile.apply(partitionValues(url), SparkPath.fromUrlString(url),
            start, length, new String[0], 0L, size, PartitionedFile.apply$default$8());
        Iterator<InternalRow> opened;
        try {
            opened = new Failing(scala.jdk.javaapi.CollectionConverters.asJava(formatReader.apply(file)), described);
            if (!options.skipUnreadable) {
                return opened;
            }
            List<InternalRow> whole = new ArrayList<>();
            while (opened.hasNext()) {
                whole.add(opened.next().copy());
            }
            return whole.iterator();
        } catch (SourceReadError error) {
            if (!options.skipUnreadable) {
                throw error;
            }
            LOG.warn("skipping an unreadable split: {}", error.getMessage());
            ObjectNode event = ReadOptions.JSON.createObjectNode();
            event.put("type", "SplitSkipped");
            event.put("split_id", split.path("id").asText());
            event.put("reason", error.getMessage());
            driver.coordinatorEvent(options.coordinator, subtask, attempt, event);
            return java.util.Collections.emptyIterator();
        } catch (RuntimeException error) {
            throw new SourceReadError(reason(described, error), error);
        }
    }

    private String reason(String described, Throwable error) {
        Throwable root = error;
        while (root.getCause() != null && root.getCause() != root) {
            root = root.getCause();
        }
        return "cannot read " + described + " as " + options.format + ": "
            + root.getClass().getSimpleName() + ": " + root.getMessage();
    }

    /** Rows of a split; any failure while reading becomes a SourceReadError naming the split. */
    private final class Failing implements Iterator<InternalRow> {
        private final Iterator<InternalRow> inner;
        private final String described;

        Failing(Iterator<InternalRow> inner, String described) {
            this.inner = inner;
            this.described = described;
        }

        @Override
        public boolean hasNext() {
            try {
                return inner.hasNext();
            } catch (RuntimeException error) {
                throw new SourceReadError(reason(described, error), error);
            }
        }

        @Override
        public InternalRow next() {
            try {
                return inner.next();
            } catch (RuntimeException error) {
                throw new SourceReadError(reason(described, error), error);
            }
        }
    }

    private static Iterator<InternalRow> concat(List<Iterator<InternalRow>> parts) {
        Iterator<Iterator<InternalRow>> each = parts.iterator();
        return new Iterator<InternalRow>() {
            private Iterator<InternalRow> part = java.util.Collections.emptyIterator();

            @Override
            public boolean hasNext() {
                while (!part.hasNext() && each.hasNext()) {
                    part = each.next();
                }
                return part.hasNext();
            }

            @Override
            public InternalRow next() {
                hasNext();
                return part.next();
            }
        };
    }

    /** The {@code key=value} directories between the source's URL and the file, as Spark
     * escapes partition paths (coordinator/files.py partition_values); Hive's default is null. */
    private InternalRow partitionValues(String url) {
        Object[] values = new Object[options.partitionColumns.size()];
        String root = options.root.split("\\?", 2)[0].replaceAll("/+$", "") + "/";
        String path = url.split("\\?", 2)[0];
        if (values.length > 0 && path.startsWith(root)) {
            String[] directories = unquote(path.substring(root.length())).split("/", -1);
            for (int index = 0; index < directories.length - 1; index++) {
                int equals = directories[index].indexOf('=');
                if (equals <= 0) {
                    continue;
                }
                int column = options.partitionColumns.indexOf(unquote(directories[index].substring(0, equals)));
                String text = unquote(directories[index].substring(equals + 1));
                if (column >= 0) {
                    values[column] = HIVE_NULL.equals(text) ? null : UTF8String.fromString(text);
                }
            }
        }
        return new GenericInternalRow(values);
    }

    /** Percent-decoding as Python's urllib.parse.unquote does it ('+' stays '+'). */
    static String unquote(String text) {
        if (text.indexOf('%') < 0) {
            return text;
        }
        java.io.ByteArrayOutputStream bytes = new java.io.ByteArrayOutputStream();
        StringBuilder out = new StringBuilder();
        for (int index = 0; index < text.length(); index++) {
            char c = text.charAt(index);
            if (c == '%' && index + 2 < text.length()
                    && Character.digit(text.charAt(index + 1), 16) >= 0
                    && Character.digit(text.charAt(index + 2), 16) >= 0) {
                bytes.write(Integer.parseInt(text.substring(index + 1, index + 3), 16));
                index += 2;
                continue;
            }
            if (bytes.size() > 0) {
                out.append(new String(bytes.toByteArray(), StandardCharsets.UTF_8));
                bytes.reset();
            }
            out.append(c);
        }
        if (bytes.size() > 0) {
            out.append(new String(bytes.toByteArray(), StandardCharsets.UTF_8));
        }
        return out.toString();
    }

    private void audit(String splitId) {
        String path = System.getenv(AUDIT_ENV);
        if (path == null || path.isEmpty()) {
            return;
        }
        ObjectNode line = ReadOptions.JSON.createObjectNode();
        line.put("stage", round.path("stage").asText());
        line.put("attempt", round.path("attempt").asInt());
        line.put("subtask", subtask);
        line.put("split", splitId);
        line.put("at", Math.round(System.currentTimeMillis()) / 1000.0);
        try (OutputStream out = new FileOutputStream(path, true)) {  // one short append: atomic
            out.write((line.toString() + "\n").getBytes(StandardCharsets.UTF_8));
        } catch (IOException error) {
            throw new BatchTaskError("cannot append to the split audit " + path + ": " + error);
        }
    }

    /** Builds the slot readers on executors. */
    static final class Factory implements PartitionReaderFactory {
        private static final long serialVersionUID = 1L;
        private final ReadOptions options;
        private final Function1<PartitionedFile, scala.collection.Iterator<InternalRow>> formatReader;

        Factory(ReadOptions options, Function1<PartitionedFile, scala.collection.Iterator<InternalRow>> formatReader) {
            this.options = options;
            this.formatReader = formatReader;
        }

        @Override
        public PartitionReader<InternalRow> createReader(InputPartition partition) {
            return new SlotReader(options, formatReader, ((FilesRead.SlotPartition) partition).slot);
        }
    }
}
