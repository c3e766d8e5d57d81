package dev.finishable.spark;

import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A reader slot on an executor: it becomes subtask {@code tasks[slot]} of the round, pulls splits
 * one at a time from the driver's coordinator up to the round's quota, reads each with Spark's
 * format reader, and tells the driver when it read its whole share ({@code task-read}). The same
 * protocol as BatchSourceReader.read in connectors/batch/datasources.py, step for step.
 */
final class SlotReader implements PartitionReader<InternalRow> {
    static final String AUDIT_ENV = "FINISHABLE_SPLIT_AUDIT";
    private static final Logger LOG = LoggerFactory.getLogger(SlotReader.class);

    private final ReadOptions options;
    private final SplitReader splitReader;
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

    SlotReader(ReadOptions options, SplitReader splitReader, int slot) {
        this.options = options;
        this.splitReader = splitReader;
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
        round = Rounds.current(context);
        Integer task = Rounds.taskOf(round, slot, true);
        if (task == null) {
            return false;
        }
        subtask = task;
        attempt = Rounds.coordinatorAttempt(round, context);
        quota = Math.max(1, round.path("quota").asInt());
        JsonNode started = driver.runtime("task-start", taskBody());
        // Spark re-ran a task whose output the driver already committed: read nothing.
        return !started.path("committed").asBoolean(false);
    }

    private ObjectNode taskBody() {
        return Rounds.taskBody(round, subtask, TaskContext.get());
    }

    private void reportSkipped(String splitId, String reason) {
        ObjectNode event = ReadOptions.JSON.createObjectNode();
        event.put("type", "SplitSkipped");
        event.put("split_id", splitId);
        event.put("reason", reason);
        driver.coordinatorEvent(options.coordinator, subtask, attempt, event);
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
            parts.add(splitReader.rows(split, this::reportSkipped));
        }
        return SplitReader.concat(parts);
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
        private final SplitReader splits;

        Factory(ReadOptions options, SplitReader splits) {
            this.options = options;
            this.splits = splits;
        }

        @Override
        public PartitionReader<InternalRow> createReader(InputPartition partition) {
            return new SlotReader(options, splits, ((FilesRead.SlotPartition) partition).slot);
        }
    }
}
