package dev.finishable.spark;

import java.util.ArrayList;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;

import org.apache.hadoop.conf.Configuration;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.execution.datasources.FileFormat;
import org.apache.spark.sql.execution.datasources.FileFormat$;
import org.apache.spark.sql.execution.datasources.PartitionedFile;
import org.apache.spark.sql.execution.datasources.csv.CSVFileFormat;
import org.apache.spark.sql.execution.datasources.json.JsonFileFormat;
import org.apache.spark.sql.execution.datasources.orc.OrcFileFormat;
import org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import scala.Function1;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The reader slots of one Batch read of a {@code sources.Files} source, read by Spark's own file
 * format readers (the ones {@code spark.read} uses) while the driver's coordinator owns the
 * splits.
 *
 * <p>It is the JVM twin of {@code finishable_read__<name>} (connectors/batch/datasources.py):
 * the same slots, the same round property, the same calls to the driver; only the rows never
 * leave the JVM. The format reader is built once per stage run, in the driver, as Spark's file
 * scan builds it, and applied on executors to each split the coordinator hands out.
 */
public final class FilesRead implements TableProvider {

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return ReadOptions.of(options).outputSchema();
    }

    @Override
    public boolean supportsExternalMetadata() {
        return false;
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new ReadTable(ReadOptions.of(properties));
    }

    private static final class ReadTable implements Table, SupportsRead {
        private final ReadOptions options;

        ReadTable(ReadOptions options) {
            this.options = options;
        }

        /** The read's own name, so that the job graph finds it in Spark's plans. */
        @Override
        public String name() {
            return options.name;
        }

        @Override
        @SuppressWarnings("deprecation")  // columns() derives from it; Spark 4 still calls it
        public StructType schema() {
            return options.outputSchema();
        }

        @Override
        public Set<TableCapability> capabilities() {
            return EnumSet.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ);
        }

        @Override
        public ScanBuilder newScanBuilder(CaseInsensitiveStringMap ignored) {
            return new ReadScanBuilder(options);
        }
    }

    private static final class ReadScanBuilder implements ScanBuilder, SupportsPushDownRequiredColumns {
        private final ReadOptions options;
        private StructType required;

        ReadScanBuilder(ReadOptions options) {
            this.options = options;
            this.required = options.outputSchema();
        }

        @Override
        public void pruneColumns(StructType requiredSchema) {
            required = requiredSchema;
        }

        @Override
        public Scan build() {
            // Only data columns are pruned; partition columns come from the paths and cost nothing.
            Set<String> wanted = new java.util.HashSet<>(List.of(required.fieldNames()));
            List<StructField> data = new ArrayList<>();
            for (StructField field : options.dataSchema.fields()) {
                if (wanted.contains(field.name())) {
                    data.add(field);
                }
            }
            return new ReadScan(options, new StructType(data.toArray(new StructField[0])));
        }
    }

    private static final class ReadScan implements Scan, Batch {
        private final ReadOptions options;
        private final StructType requiredData;

        ReadScan(ReadOptions options, StructType requiredData) {
            this.options = options;
            this.requiredData = requiredData;
        }

        @Override
        public StructType readSchema() {
            return options.withPartitions(requiredData);
        }

        @Override
        public String description() {
            return "finishable read " + options.read + " (" + options.format + ", "
                + options.slots + " slots)";
        }

        @Override
        public Batch toBatch() {
            return this;
        }

        @Override
        public InputPartition[] planInputPartitions() {
            InputPartition[] slots = new InputPartition[options.slots];
            for (int slot = 0; slot < slots.length; slot++) {
                slots[slot] = new SlotPartition(slot);
            }
            return slots;
        }

        @Override
        public PartitionReaderFactory createReaderFactory() {
            return new SlotReader.Factory(options, splitReader(options, requiredData));
        }

        @Override
        public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
            return new SplitStream(options.stream, splitReader(options, requiredData), readSchema());
        }
    }

    /** Spark's format reader for the source, built in the driver as Spark's file scan builds it. */
    static SplitReader splitReader(ReadOptions options, StructType requiredData) {
        SparkSession spark = SparkSession.active();
        Map<String, String> readerOptions = new HashMap<>(options.sparkOptions);
        // Rows, not columnar batches: the readers hand Spark one row at a time.
        readerOptions.put(FileFormat$.MODULE$.OPTION_RETURNING_BATCH(), "false");
        scala.collection.immutable.Map<String, String> scalaOptions = immutable(readerOptions);
        Configuration hadoopConf = spark.sessionState().newHadoopConfWithOptions(scalaOptions);
        options.hadoopConf.forEach(hadoopConf::set);
        @SuppressWarnings("unchecked")
        scala.collection.immutable.Seq<Filter> noFilters =
            (scala.collection.immutable.Seq<Filter>) (Object) scala.collection.immutable.Nil$.MODULE$;
        Function1<PartitionedFile, scala.collection.Iterator<InternalRow>> reader =
            fileFormat(options.format).buildReaderWithPartitionValues(spark, options.dataSchema,
                options.partitionSchema(), requiredData, noFilters, scalaOptions, hadoopConf);
        return new SplitReader(options, reader);
    }

    static FileFormat fileFormat(String format) {
        switch (format.toLowerCase(Locale.ROOT)) {
            case "json":
                return new JsonFileFormat();
            case "csv":
                return new CSVFileFormat();
            case "parquet":
                return new ParquetFileFormat();
            case "orc":
                return new OrcFileFormat();
            default:
                throw new IllegalArgumentException("the finishable read source reads json, csv, "
                    + "parquet or orc, not " + format);
        }
    }

    private static scala.collection.immutable.Map<String, String> immutable(Map<String, String> map) {
        return scala.collection.immutable.Map$.MODULE$.from(CollectionConverters.asScala(map));
    }

    /** One reader slot: which task it runs is decided by each round (the local property). */
    static final class SlotPartition implements InputPartition {
        private static final long serialVersionUID = 1L;
        final int slot;

        SlotPartition(int slot) {
            this.slot = slot;
        }
    }
}
