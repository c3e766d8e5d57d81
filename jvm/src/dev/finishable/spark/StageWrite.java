package dev.finishable.spark;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.Serializable;
import java.net.HttpURLConnection;
import java.nio.charset.StandardCharsets;
import java.util.EnumSet;
import java.util.Map;
import java.util.zip.CRC32;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.arrow.vector.ipc.ArrowStreamWriter;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.execution.arrow.ArrowWriter;
import org.apache.spark.sql.types.StructType;

/**
 * A Batch stage's writers in the JVM: each task streams its rows as one Arrow IPC partition to a
 * shuffle server (uncommitted), then tells the driver ({@code task-finished}), which commits the
 * upload of the one attempt it accepts. The JVM twin of {@code stage_writer} in
 * connectors/batch/datasources.py: same round property, same server choice, same calls; the rows
 * never reach a Python worker.
 */
public final class StageWrite extends WriteProvider {
    private static final int BATCH_ROWS = 65_536;

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new StageTable(schema, Settings.of(properties));
    }

    /** What every writer of one stage run needs (data source options). */
    static final class Settings implements Serializable {
        private static final long serialVersionUID = 1L;
        final String endpoint;
        final String token;
        final String dataset;
        final boolean slotted;

        private Settings(String endpoint, String token, String dataset, boolean slotted) {
            this.endpoint = endpoint;
            this.token = token;
            this.dataset = dataset;
            this.slotted = slotted;
        }

        static Settings of(Map<String, String> options) {
            String what = "a finishable stage write";
            return new Settings(ReadOptions.required(options, "endpoint", what),
                ReadOptions.required(options, "token", what), ReadOptions.required(options, "dataset", what),
                Boolean.parseBoolean(ReadOptions.required(options, "slotted", what)));
        }
    }

    private static final class StageTable extends WriteTable {
        private final Settings settings;

        StageTable(StructType schema, Settings settings) {
            super("finishable_stage_write__" + settings.dataset, schema,
                EnumSet.of(TableCapability.BATCH_WRITE, TableCapability.ACCEPT_ANY_SCHEMA));
            this.settings = settings;
        }

        @Override
        public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
            StructType written = info.schema();
            return new WriteBuilder() {
                @Override
                public Write build() {
                    return new Write() {
                        @Override
                        public BatchWrite toBatch() {
                            return new StageBatchWrite(written, settings);
                        }
                    };
                }
            };
        }
    }

    /** The driver's commit is task-finished's, per task: nothing is left to do for the job. */
    private static final class StageBatchWrite extends TaskCommittedWrite {
        private final StructType schema;
        private final Settings settings;

        StageBatchWrite(StructType schema, Settings settings) {
            this.schema = schema;
            this.settings = settings;
        }

        @Override
        public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo info) {
            return new Factory(schema, settings);
        }
    }

    private static final class Factory implements DataWriterFactory {
        private static final long serialVersionUID = 1L;
        private final StructType schema;
        private final Settings settings;

        Factory(StructType schema, Settings settings) {
            this.schema = schema;
            this.settings = settings;
        }

        @Override
        public DataWriter<InternalRow> createWriter(int partitionId, long taskId) {
            return new PartitionWriter(schema, settings, partitionId);
        }
    }

    private static final class Committed implements WriterCommitMessage {
        private static final long serialVersionUID = 1L;
    }

    /** One task's rows: an Arrow IPC stream, chunked straight into the shuffle server's PUT. */
    private static final class PartitionWriter implements DataWriter<InternalRow> {
        private final StructType schema;
        private final Settings settings;
        private final JsonNode round;
        private final TaskContext context;
        private final Integer task;
        private final long started = System.nanoTime();
        private long writing;
        private long rows;
        private int batchRows;
        private String server;
        private HttpURLConnection connection;
        private OutputStream body;
        private ArrowWriter arrow;
        private ArrowStreamWriter stream;

        PartitionWriter(StructType schema, Settings settings, int partitionId) {
            this.schema = schema;
            this.settings = settings;
            this.context = TaskContext.get();
            this.round = Rounds.current(context);
            this.task = Rounds.taskOf(round, partitionId, settings.slotted);
        }

        @Override
        public void write(InternalRow row) throws IOException {
            if (task == null) {
                return;  // an idle slot: its input is empty
            }
            long at = System.nanoTime();
            if (stream == null) {
                open();
            }
            arrow.write(row);
            rows++;
            if (++batchRows >= BATCH_ROWS) {
                flushBatch();
            }
            writing += System.nanoTime() - at;
        }

        @Override
        public WriterCommitMessage commit() throws IOException {
            if (task == null) {
                return new Committed();
            }
            long at = System.nanoTime();
            if (stream == null) {
                open();
            }
            if (batchRows > 0) {
                flushBatch();
            }
            stream.end();
            body.close();
            JsonNode uploaded = answer();
            writing += System.nanoTime() - at;
            ObjectNode report = Rounds.taskBody(round, task, context);
            report.put("round", round.path("round").asInt());
            report.put("task_attempt", context.attemptNumber());
            report.put("rows", rows);
            report.put("bytes", uploaded.path("bytes").asLong());
            ObjectNode upload = report.putObject("upload");
            upload.put("server", server);
            upload.put("dataset", settings.dataset);
            upload.put("partition", task);
            upload.put("id", uploaded.path("upload").asText());
            ObjectNode timings = report.putObject("timings");
            double total = (System.nanoTime() - started) / 1e9;
            double output = writing / 1e9;
            timings.put("input", Math.round(Math.max(0.0, total - output) * 1e4) / 1e4);
            timings.put("output", Math.round(output * 1e4) / 1e4);
            new DriverCalls(settings.endpoint, settings.token).runtime("task-finished", report);
            return new Committed();
        }

        @Override
        public void abort() {
            if (connection != null) {
                connection.disconnect();  // the server drops an upload cut off
            }
        }

        @Override
        public void close() {
            if (arrow != null) {
                arrow.root().close();
            }
        }

        private void open() throws IOException {
            java.util.List<String> servers = new java.util.ArrayList<>();
            round.path("servers").forEach(s -> servers.add(s.asText()));
            if (servers.isEmpty()) {
                throw new BatchTaskError("no shuffle server is available to this round");
            }
            CRC32 crc = new CRC32();
            crc.update((settings.dataset + "/" + task).getBytes(StandardCharsets.UTF_8));
            server = servers.get((int) (crc.getValue() % servers.size()));
            String label = "a" + round.path("attempt").asInt() + "-r" + round.path("round").asInt()
                + "-t" + context.attemptNumber();
            String epoch = round.path("run").asInt(1) + "." + round.path("attempt").asInt();
            String query = "attempt=" + DriverCalls.encode(label) + "&epoch=" + DriverCalls.encode(epoch);
            connection = ShuffleCalls.connect(server, settings.dataset, task, query, settings.token);
            connection.setRequestMethod("PUT");
            connection.setDoOutput(true);
            connection.setChunkedStreamingMode(1 << 20);
            connection.setRequestProperty("Content-Type", "application/vnd.apache.arrow.stream");
            body = new java.io.BufferedOutputStream(connection.getOutputStream(), 1 << 20);
            // Spark's timestamps are UTC instants; the zone is a label (the stage readers want UTC).
            arrow = ArrowWriter.create(schema, "UTC", true, false);
            stream = new ArrowStreamWriter(arrow.root(), null, body);
            stream.start();
        }

        private void flushBatch() throws IOException {
            arrow.finish();
            stream.writeBatch();
            arrow.reset();
            batchRows = 0;
        }

        private JsonNode answer() throws IOException {
            int status = connection.getResponseCode();
            InputStream in = status < 400 ? connection.getInputStream() : connection.getErrorStream();
            byte[] text = in == null ? new byte[0] : in.readAllBytes();
            if (status < 200 || status >= 300) {
                throw new BatchTaskError("shuffle server " + server + " refused partition " + task
                    + " of " + settings.dataset + ": HTTP " + status + ": "
                    + new String(text, StandardCharsets.UTF_8));
            }
            return ReadOptions.JSON.readTree(text);
        }
    }
}
