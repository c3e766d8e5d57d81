package dev.finishable.spark;

import java.io.IOException;
import java.io.Serializable;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.UUID;

import com.fasterxml.jackson.core.type.TypeReference;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapreduce.Job;
import org.apache.hadoop.mapreduce.TaskAttemptID;
import org.apache.hadoop.mapreduce.TaskType;
import org.apache.hadoop.mapreduce.task.TaskAttemptContextImpl;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.SupportsTruncate;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.connector.write.streaming.StreamingDataWriterFactory;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;
import org.apache.spark.sql.execution.datasources.OutputWriter;
import org.apache.spark.sql.execution.datasources.OutputWriterFactory;
import org.apache.spark.sql.internal.connector.SupportsStreamingUpdateAsAppend;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.SerializableConfiguration;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import scala.jdk.javaapi.CollectionConverters;

/**
 * {@code sinks.TransactionalFiles} written by Spark's own file writer (the {@code OutputWriter}
 * that {@code DataFrame.write.parquet} uses), the JVM twin of the Python sink writers: phase one
 * of the sink's commit. Each task writes its rows as one staged file under the sink's
 * {@code _staging/} directory, named as connectors/sink_store.py names staged files. A Batch
 * task reports its staged part with {@code task-finished} (the driver publishes the accepted
 * attempts' parts at the final checkpoint, as {@code sink_writer}'s in
 * connectors/batch/datasources.py); a micro-batch's tasks send theirs to the driver, which
 * publishes them as the Python writer's {@code commit} does (connectors/streaming/sink.py).
 * Manifest, atomic publish and crash windows are those of connectors/staging.py either way.
 */
public final class SinkWrite extends WriteProvider {
    private static final Logger LOG = LoggerFactory.getLogger(SinkWrite.class);

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new SinkTable(schema, Settings.of(properties));
    }

    /** What every writer of one sink stage run needs (data source options; connectors/jvm.py). */
    static final class Settings implements Serializable {
        private static final long serialVersionUID = 1L;
        final String endpoint;
        final String token;
        final String sink;
        final String format;
        /** The sink's directory as Hadoop finds it (connectors/jvm.py hadoop_url). */
        final String sinkUrl;
        /** Batch jobs: the sink batch the run publishes as; streaming: -1 (each epoch's). */
        final long batchId;
        final Map<String, String> hadoopConf;

        /** A batch's staging directory, relative to the sink's: connectors/sink_store.py's
         * {@code _staging/<batch:020d>}, where the driver's publish finds and cleans it. */
        static String stagingDir(long batchId) {
            return String.format("_staging/%020d", batchId);
        }

        private Settings(Map<String, String> options) {
            String what = "a finishable sink write";
            endpoint = ReadOptions.required(options, "endpoint", what);
            token = ReadOptions.required(options, "token", what);
            sink = ReadOptions.required(options, "sink", what);
            format = ReadOptions.required(options, "format", what);
            sinkUrl = ReadOptions.required(options, "sinkUrl", what);
            batchId = Long.parseLong(options.getOrDefault("batchId", "-1"));
            try {
                hadoopConf = ReadOptions.JSON.readValue(options.getOrDefault("hadoopConf", "{}"),
                    new TypeReference<LinkedHashMap<String, String>>() {});
            } catch (IOException error) {
                throw new IllegalArgumentException(what + ": bad hadoopConf: " + error, error);
            }
        }

        static Settings of(Map<String, String> options) {
            return new Settings(ReadOptions.known(options, "endpoint", "token", "sink", "format",
                "sinkUrl", "batchId", "hadoopConf"));
        }
    }

    private static final class SinkTable extends WriteTable {
        private final Settings settings;

        SinkTable(StructType schema, Settings settings) {
            super("finishable_sink_write__" + settings.sink, schema, EnumSet.of(
                TableCapability.BATCH_WRITE, TableCapability.STREAMING_WRITE, TableCapability.ACCEPT_ANY_SCHEMA));
            this.settings = settings;
        }

        @Override
        public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
            return new Builder(info.schema(), settings);
        }
    }

    /** Complete mode truncates: each micro-batch replaces the sink's rows (the manifest says so);
     * update mode appends, as the Python sink's writer does. */
    private static final class Builder implements SupportsTruncate, SupportsStreamingUpdateAsAppend {
        private final StructType schema;
        private final Settings settings;
        private boolean overwrite;

        Builder(StructType schema, Settings settings) {
            this.schema = schema;
            this.settings = settings;
        }

        @Override
        public WriteBuilder truncate() {
            overwrite = true;
            return this;
        }

        @Override
        public Write build() {
            return new Write() {
                @Override
                public BatchWrite toBatch() {
                    return new SinkBatchWrite(schema, settings);
                }

                @Override
                public StreamingWrite toStreaming() {
                    return new SinkStreamingWrite(schema, settings, overwrite);
                }
            };
        }
    }

    /** The driver's commit is the final checkpoint's publish, from task-finished's reports. */
    private static final class SinkBatchWrite extends TaskCommittedWrite {
        private final StructType schema;
        private final Settings settings;

        SinkBatchWrite(StructType schema, Settings settings) {
            this.schema = schema;
            this.settings = settings;
        }

        @Override
        public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo info) {
            return new BatchFactory(prepare(schema, settings), settings);
        }
    }

    /**
     * Phase two of a micro-batch: the driver's runtime publishes what every task staged
     * ({@code POST /v1/batches/N/publish}: the runtime's prepare step, connectors/staging.py
     * publish_files with its manifest, then its published step), as the Python sink's
     * {@code commit} does in a Python worker. Spark records the batch in its commit log only after
     * this returns; a replay after a crash finds the manifest and publishes nothing.
     */
    private static final class SinkStreamingWrite implements StreamingWrite {
        private final StructType schema;
        private final Settings settings;
        private final boolean overwrite;

        SinkStreamingWrite(StructType schema, Settings settings, boolean overwrite) {
            this.schema = schema;
            this.settings = settings;
            this.overwrite = overwrite;
        }

        @Override
        public StreamingDataWriterFactory createStreamingWriterFactory(PhysicalWriteInfo info) {
            return new StreamFactory(prepare(Sentinels.written(schema), settings), settings,
                new Sentinels(schema));
        }

        @Override
        public boolean useCommitCoordinator() {
            return false;
        }

        @Override
        public void commit(long epochId, WriterCommitMessage[] messages) {
            ObjectNode body = ReadOptions.JSON.createObjectNode();
            body.put("sink", settings.sink);
            body.put("overwrite", overwrite);
            body.put("schema", Sentinels.written(schema).json());
            ArrayNode parts = body.putArray("parts");
            for (WriterCommitMessage message : messages) {
                if (message == null) {
                    parts.addNull();  // the driver refuses to publish a partial batch
                } else {
                    parts.add(((Staged) message).part());
                }
            }
            new DriverCalls(settings.endpoint, settings.token).publish(epochId, body);
        }

        @Override
        public void abort(long epochId, WriterCommitMessage[] messages) {
            Path staging = new Path(settings.sinkUrl, Settings.stagingDir(epochId));
            try {
                Configuration conf = SparkSession.active().sessionState().newHadoopConf();
                settings.hadoopConf.forEach(conf::set);
                staging.getFileSystem(conf).delete(staging, true);
            } catch (IOException error) {  // the next publish cleans staging up to its batch
                LOG.warn("aborted batch {} of sink {}: its staging stays: {}", epochId, settings.sink,
                    error.toString());
            }
        }
    }

    /** Spark's writer for the format, prepared in the driver as {@code DataFrame.write} prepares
     * it; timestamps as int64 microseconds, as Arrow and the Python writers write them. */
    private static Prepared prepare(StructType written, Settings settings) {
        SparkSession spark = SparkSession.active();
        scala.collection.immutable.Map<String, String> none =
            scala.collection.immutable.Map$.MODULE$.from(CollectionConverters.asScala(new HashMap<String, String>()));
        Configuration conf = spark.sessionState().newHadoopConfWithOptions(none);
        settings.hadoopConf.forEach(conf::set);
        try {
            Job job = Job.getInstance(conf);
            OutputWriterFactory factory = FilesRead.fileFormat(settings.format)
                .prepareWrite(spark, job, none, written);
            Configuration prepared = job.getConfiguration();
            prepared.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS");
            return new Prepared(factory, written, new SerializableConfiguration(prepared));
        } catch (IOException error) {
            throw new BatchTaskError("cannot prepare the " + settings.format + " writer of sink "
                + settings.sink + ": " + error);
        }
    }

    /** A prepared writer, the schema it writes and its Hadoop settings (shipped to the tasks). */
    private static final class Prepared implements Serializable {
        private static final long serialVersionUID = 1L;
        final OutputWriterFactory factory;
        final StructType written;
        final SerializableConfiguration conf;

        Prepared(OutputWriterFactory factory, StructType written, SerializableConfiguration conf) {
            this.factory = factory;
            this.written = written;
            this.conf = conf;
        }
    }

    private static final class BatchFactory implements DataWriterFactory {
        private static final long serialVersionUID = 1L;
        private final Prepared prepared;
        private final Settings settings;

        BatchFactory(Prepared prepared, Settings settings) {
            this.prepared = prepared;
            this.settings = settings;
        }

        @Override
        public DataWriter<InternalRow> createWriter(int partitionId, long taskId) {
            return new BatchTaskWriter(prepared, settings, partitionId);
        }
    }

    private static final class StreamFactory implements StreamingDataWriterFactory {
        private static final long serialVersionUID = 1L;
        private final Prepared prepared;
        private final Settings settings;
        private final Sentinels sentinels;

        StreamFactory(Prepared prepared, Settings settings, Sentinels sentinels) {
            this.prepared = prepared;
            this.settings = settings;
            this.sentinels = sentinels;
        }

        @Override
        public DataWriter<InternalRow> createWriter(int partitionId, long taskId, long epochId) {
            return new StreamTaskWriter(prepared, settings, sentinels, partitionId, epochId);
        }
    }

    /** A streaming task's commit message: its staged part (connectors/staging.py StagedPart). */
    private static final class Staged implements WriterCommitMessage {
        private static final long serialVersionUID = 1L;
        private final String json;

        Staged(ObjectNode part) {
            this.json = part.toString();
        }

        ObjectNode part() {
            try {
                return (ObjectNode) ReadOptions.JSON.readTree(json);
            } catch (IOException error) {
                throw new IllegalStateException("a staged part that is not JSON: " + error, error);
            }
        }
    }

    private static final class Nothing implements WriterCommitMessage {
        private static final long serialVersionUID = 1L;
    }

    /**
     * One task's staged file of one sink batch, opened on the first row it keeps (none for a task
     * without rows), named as sink_store.py's staged_file_name names it: unique per task attempt,
     * so retries and replays never overwrite each other.
     */
    private static final class StagedFile {
        private final Prepared prepared;
        private final Settings settings;
        private final TaskContext context;
        private final long batchId;
        private final int partition;
        private String name;
        private OutputWriter writer;
        long rows;
        long sentinels;

        StagedFile(Prepared prepared, Settings settings, long batchId, int partition) {
            this.prepared = prepared;
            this.settings = settings;
            this.context = TaskContext.get();
            this.batchId = batchId;
            this.partition = partition;
        }

        void write(InternalRow row) {
            if (writer == null) {
                name = String.format("part-%05d-t%d-a%d-%s.%s", partition, context.taskAttemptId(),
                    context.attemptNumber(),
                    UUID.randomUUID().toString().replace("-", "").substring(0, 12), settings.format);
                TaskAttemptContextImpl attempt = new TaskAttemptContextImpl(prepared.conf.value(),
                    new TaskAttemptID("finishable", (int) batchId, TaskType.MAP, partition,
                        context.attemptNumber()));
                writer = prepared.factory.newInstance(path().toString(), prepared.written, attempt);
            }
            writer.write(row);
            rows++;
        }

        /** Close the file; the staged part, as connectors/batch/datasources.py staged_to_json. */
        ObjectNode close() throws IOException {
            long size = 0;
            if (writer != null) {
                writer.close();
                writer = null;
                size = path().getFileSystem(prepared.conf.value()).getFileStatus(path()).getLen();
            }
            ObjectNode staged = ReadOptions.JSON.createObjectNode();
            ObjectNode identity = staged.putObject("task");
            identity.put("batch_id", batchId);
            identity.put("partition", partition);
            identity.put("task_attempt_id", context.taskAttemptId());
            identity.put("attempt", context.attemptNumber());
            staged.put("path", name == null ? null : Settings.stagingDir(batchId) + "/" + name);
            staged.put("rows", rows);
            staged.put("size", size);
            staged.put("sentinels", sentinels);
            staged.putNull("schema");  // the driver takes the query's (connectors/staging.py)
            return staged;
        }

        /** A half-written file goes (the batch's staging goes at its publish anyway). */
        void abort() throws IOException {
            if (writer != null) {
                try {
                    writer.close();
                } finally {
                    writer = null;
                    path().getFileSystem(prepared.conf.value()).delete(path(), false);
                }
            }
        }

        private Path path() {
            return new Path(new Path(settings.sinkUrl, Settings.stagingDir(batchId)), name);
        }
    }

    /** A Batch sink task: its staged part reported with task-finished, as the Python writer's. */
    private static final class BatchTaskWriter implements DataWriter<InternalRow> {
        private final Settings settings;
        private final JsonNode round;
        private final TaskContext context;
        private final Integer task;
        private final StagedFile file;
        private final long started = System.nanoTime();
        private long writing;

        BatchTaskWriter(Prepared prepared, Settings settings, int partitionId) {
            this.settings = settings;
            this.context = TaskContext.get();
            this.round = Rounds.current(context);
            this.task = Rounds.taskOf(round, partitionId, false);
            this.file = task == null ? null : new StagedFile(prepared, settings, settings.batchId, task);
        }

        @Override
        public void write(InternalRow row) {
            if (file == null) {
                return;  // not a task of this round: its input is empty
            }
            long at = System.nanoTime();
            file.write(row);
            writing += System.nanoTime() - at;
        }

        @Override
        public WriterCommitMessage commit() throws IOException {
            if (file == null) {
                return new Nothing();
            }
            long at = System.nanoTime();
            ObjectNode staged = file.close();
            writing += System.nanoTime() - at;
            ObjectNode report = Rounds.taskBody(round, task, context);
            report.put("round", round.path("round").asInt());
            report.put("task_attempt", context.attemptNumber());
            report.put("rows", file.rows);
            report.put("bytes", staged.path("size").asLong());
            report.set("staged", staged);
            ObjectNode timings = report.putObject("timings");
            double total = (System.nanoTime() - started) / 1e9;
            double output = writing / 1e9;
            timings.put("input", Math.round(Math.max(0.0, total - output) * 1e4) / 1e4);
            timings.put("output", Math.round(output * 1e4) / 1e4);
            new DriverCalls(settings.endpoint, settings.token).runtime("task-finished", report);
            return new Nothing();
        }

        @Override
        public void abort() throws IOException {
            if (file != null) {
                file.abort();
            }
        }

        @Override
        public void close() throws IOException {
            abort();  // after a commit there is nothing left open
        }
    }

    /** A micro-batch's sink task: drain sentinels dropped, its staged part the commit message. */
    private static final class StreamTaskWriter implements DataWriter<InternalRow> {
        private final Sentinels sentinels;
        private final StagedFile file;

        StreamTaskWriter(Prepared prepared, Settings settings, Sentinels sentinels, int partitionId,
                long epochId) {
            this.sentinels = sentinels;
            this.file = new StagedFile(prepared, settings, epochId, partitionId);
        }

        @Override
        public void write(InternalRow row) {
            if (sentinels.isSentinel(row)) {
                file.sentinels++;
                return;
            }
            file.write(sentinels.withoutMarker(row));
        }

        @Override
        public WriterCommitMessage commit() throws IOException {
            ObjectNode staged = file.close();
            if (file.sentinels > 0) {
                LOG.info("partition {}: dropped {} drain sentinel row(s) before sink {}",
                    staged.path("task").path("partition").asInt(), file.sentinels, file.settings.sink);
            }
            return new Staged(staged);
        }

        @Override
        public void abort() throws IOException {
            file.abort();
        }

        @Override
        public void close() throws IOException {
            file.abort();
        }
    }
}
