package dev.finishable.spark;

import java.io.File;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.HttpURLConnection;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.security.DigestInputStream;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.EnumSet;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Set;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowStreamReader;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.ArrowUtils;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * A staged dataset read back in the JVM: one slot per result partition, whose location the
 * driver gives when the task runs ({@code locations}); the partition is fetched from its shuffle
 * server, its sha256 checked before any row is used, and its Arrow batches handed to Spark as
 * columnar batches. The JVM twin of {@code StageReader} in connectors/batch/datasources.py.
 */
public final class StageRead implements TableProvider {

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return (StructType) DataType.fromJson(required(options, "schema"));
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new StageTable(schema, new Settings(required(properties, "name"),
            required(properties, "dataset"), Integer.parseInt(required(properties, "slots")),
            required(properties, "endpoint"), required(properties, "token")));
    }

    private static String required(Map<String, String> options, String key) {
        return ReadOptions.required(options, key, "a finishable stage read");
    }

    private static final class Settings implements java.io.Serializable {
        private static final long serialVersionUID = 1L;
        final String name;
        final String dataset;
        final int slots;
        final String endpoint;
        final String token;

        Settings(String name, String dataset, int slots, String endpoint, String token) {
            this.name = name;
            this.dataset = dataset;
            this.slots = slots;
            this.endpoint = endpoint;
            this.token = token;
        }
    }

    private static final class StageTable implements Table, SupportsRead {
        private final StructType schema;
        private final Settings settings;

        StageTable(StructType schema, Settings settings) {
            this.schema = schema;
            this.settings = settings;
        }

        /** The dataset's own name, so that the job graph finds it in Spark's plans. */
        @Override
        public String name() {
            return settings.name;
        }

        @Override
        @SuppressWarnings("deprecation")  // columns() derives from it; Spark 4 still calls it
        public StructType schema() {
            return schema;
        }

        @Override
        public Set<TableCapability> capabilities() {
            return EnumSet.of(TableCapability.BATCH_READ);
        }

        @Override
        public ScanBuilder newScanBuilder(CaseInsensitiveStringMap ignored) {
            return () -> new StageScan(schema, settings);
        }
    }

    private static final class StageScan implements Scan, Batch {
        private final StructType schema;
        private final Settings settings;

        StageScan(StructType schema, Settings settings) {
            this.schema = schema;
            this.settings = settings;
        }

        @Override
        public StructType readSchema() {
            return schema;
        }

        @Override
        public String description() {
            return "finishable stage " + settings.dataset + " (" + settings.slots + " partitions)";
        }

        @Override
        public Batch toBatch() {
            return this;
        }

        @Override
        public InputPartition[] planInputPartitions() {
            InputPartition[] slots = new InputPartition[settings.slots];
            for (int slot = 0; slot < slots.length; slot++) {
                slots[slot] = new FilesRead.SlotPartition(slot);
            }
            return slots;
        }

        @Override
        public PartitionReaderFactory createReaderFactory() {
            return new Factory(settings);
        }
    }

    private static final class Factory implements PartitionReaderFactory {
        private static final long serialVersionUID = 1L;
        private final Settings settings;

        Factory(Settings settings) {
            this.settings = settings;
        }

        @Override
        public boolean supportColumnarReads(InputPartition partition) {
            return true;
        }

        @Override
        public PartitionReader<InternalRow> createReader(InputPartition partition) {
            throw new UnsupportedOperationException("a staged dataset is read as columnar batches");
        }

        @Override
        public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
            return new PartitionBatches(settings, ((FilesRead.SlotPartition) partition).slot);
        }
    }

    /** One result partition's Arrow batches, fetched and verified before the first is read. */
    private static final class PartitionBatches implements PartitionReader<ColumnarBatch> {
        private final Settings settings;
        private final int slot;
        private boolean started;
        private File spool;
        private InputStream in;
        private BufferAllocator allocator;
        private ArrowStreamReader reader;
        private ColumnarBatch current;

        PartitionBatches(Settings settings, int slot) {
            this.settings = settings;
            this.slot = slot;
        }

        @Override
        public boolean next() throws IOException {
            if (!started) {
                started = true;
                if (!open()) {
                    return false;
                }
            }
            if (reader == null || !reader.loadNextBatch()) {
                return false;
            }
            VectorSchemaRoot root = reader.getVectorSchemaRoot();
            List<org.apache.arrow.vector.FieldVector> vectors = root.getFieldVectors();
            ColumnVector[] columns = new ColumnVector[vectors.size()];
            for (int index = 0; index < columns.length; index++) {
                columns[index] = new ArrowColumnVector(vectors.get(index));
            }
            current = new ColumnarBatch(columns, root.getRowCount());
            return true;
        }

        @Override
        public ColumnarBatch get() {
            return current;
        }

        @Override
        public void close() throws IOException {
            if (reader != null) {
                reader.close();
            }
            if (in != null) {
                in.close();
            }
            if (allocator != null) {
                allocator.close();
            }
            if (spool != null) {
                Files.deleteIfExists(spool.toPath());
            }
        }

        /** False when this round does not read the partition (a narrow stage's other tasks). */
        private boolean open() throws IOException {
            TaskContext context = TaskContext.get();
            JsonNode round = Rounds.current(context);
            if (round.path("narrow").asBoolean(false) && Rounds.taskOf(round, slot, false) == null) {
                return false;
            }
            ObjectNode ask = ReadOptions.JSON.createObjectNode();
            ask.put("dataset", settings.dataset);
            ask.put("partition", slot);
            String server = new DriverCalls(settings.endpoint, settings.token).runtime("locations", ask)
                .path("server").asText("");
            if (server.isEmpty()) {
                throw new BatchTaskError("partition " + slot + " of dataset '" + settings.dataset
                    + "' has no location: its stage did not finish");
            }
            spool = fetch(server);
            in = new FileInputStream(spool);
            allocator = ArrowUtils.rootAllocator().newChildAllocator(
                "finishable stage " + settings.dataset + "/" + slot, 0, Long.MAX_VALUE);
            reader = new ArrowStreamReader(in, allocator);
            return true;
        }

        /** The partition in a local file, its sha256 checked against the server's. */
        private File fetch(String server) throws IOException {
            HttpURLConnection connection = ShuffleCalls.connect(server, settings.dataset, slot, "", settings.token);
            int status = connection.getResponseCode();
            if (status != 200) {
                InputStream error = connection.getErrorStream();
                String text = error == null ? "" : new String(error.readAllBytes(), StandardCharsets.UTF_8);
                throw new BatchTaskError("shuffle server " + server + " answered partition " + slot
                    + " of " + settings.dataset + " with HTTP " + status + ": " + text);
            }
            String expected = connection.getHeaderField("X-Finishable-Sha256");
            File file = File.createTempFile("finishable-partition-", ".arrows");
            MessageDigest digest;
            try {
                digest = MessageDigest.getInstance("SHA-256");
            } catch (NoSuchAlgorithmException impossible) {
                throw new IllegalStateException(impossible);
            }
            try (InputStream body = new DigestInputStream(connection.getInputStream(), digest);
                    OutputStream out = Files.newOutputStream(file.toPath())) {
                body.transferTo(out);
            } catch (IOException error) {
                Files.deleteIfExists(file.toPath());
                throw error;
            }
            String got = HexFormat.of().formatHex(digest.digest());
            if (expected != null && !expected.equals(got)) {
                Files.deleteIfExists(file.toPath());
                throw new BatchTaskError("partition " + slot + " of " + settings.dataset + " from "
                    + server + " has sha256 " + got + ", not the " + expected + " it was committed with");
            }
            return file;
        }
    }
}
