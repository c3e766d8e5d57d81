package dev.finishable.spark;

import java.io.Serializable;
import java.util.Iterator;
import java.util.function.BiConsumer;

import com.fasterxml.jackson.databind.JsonNode;
import org.apache.spark.sql.catalyst.InternalRow;

/** How a stream's executors read one split the coordinator handed out: Spark's file format
 * readers ({@link SplitReader}) or the Kafka consumer ({@link KafkaSplitReader}). */
interface SplitRows extends Serializable {
    /** The split's rows; {@code skipped(splitId, reason)} reports a split read as no rows. */
    Iterator<InternalRow> rows(JsonNode split, BiConsumer<String, String> skipped);
}
