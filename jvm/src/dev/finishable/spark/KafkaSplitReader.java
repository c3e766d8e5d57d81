package dev.finishable.spark;

import java.time.Duration;
import java.util.Collections;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.function.BiConsumer;

import com.fasterxml.jackson.databind.JsonNode;
import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetOutOfRangeException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.spark.TaskContext;
import org.apache.spark.util.TaskCompletionListener;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.unsafe.types.UTF8String;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Reads one Kafka split (a coordinator's {@code {"kind": "kafka", "topic", "partition", "start",
 * "end"}}) with Kafka's Java consumer, as connectors/kafka_reading.py reads it in Python: the
 * committed records of offsets {@code [start, end)} in Spark's Kafka schema ({@code key, value,
 * topic, partition, offset, timestamp, timestampType}).
 *
 * <p>The consumer reads {@code read_committed}; the split is done when the consumer's position
 * reaches its end, not after {@code end - start} records (markers and aborted records take
 * offsets and are never delivered). The end is at most the last stable offset the coordinator
 * polled, so nothing before it is still open. Consumers are kept per executor and settings and
 * reused by the next split (a consumer's connections and metadata cost more than a small split's
 * records), as Spark's Kafka source pools them; every split assigns and seeks its own partition.
 */
final class KafkaSplitReader implements SplitRows {
    private static final long serialVersionUID = 1L;
    private static final Logger LOG = LoggerFactory.getLogger(KafkaSplitReader.class);
    private static final Duration POLL = Duration.ofMillis(500);
    private static final int IDLE_PER_SETTINGS = 16;
    private static final Map<Map<String, String>, ConcurrentLinkedDeque<KafkaConsumer<byte[], byte[]>>> IDLE =
        new ConcurrentHashMap<>();

    /** The consumer's settings in the Java client's names (kafka_reading.java_consumer_settings). */
    private final Map<String, String> settings;
    private final boolean failOnDataLoss;
    private final long readTimeoutMillis;

    KafkaSplitReader(Map<String, String> settings, boolean failOnDataLoss, long readTimeoutMillis) {
        this.settings = Collections.unmodifiableMap(new HashMap<>(settings));
        this.failOnDataLoss = failOnDataLoss;
        this.readTimeoutMillis = readTimeoutMillis;
    }

    @Override
    public Iterator<InternalRow> rows(JsonNode split, BiConsumer<String, String> skipped) {
        if (!"kafka".equals(split.path("kind").asText())) {
            throw new IllegalStateException("the JVM Kafka reader got a split of kind " + split.path("kind"));
        }
        Records records = new Records(new TopicPartition(split.path("topic").asText(), split.path("partition").asInt()),
            split.path("start").asLong(), split.path("end").asLong());
        TaskContext task = TaskContext.get();
        if (task != null) {
            task.addTaskCompletionListener((TaskCompletionListener) context -> records.release());
        }
        return records;
    }

    private KafkaConsumer<byte[], byte[]> borrow() {
        KafkaConsumer<byte[], byte[]> idle = IDLE.computeIfAbsent(settings, key -> new ConcurrentLinkedDeque<>()).pollFirst();
        if (idle != null) {
            return idle;
        }
        Map<String, Object> config = new HashMap<>(settings);
        return new KafkaConsumer<>(config, new ByteArrayDeserializer(), new ByteArrayDeserializer());
    }

    /** A consumer done with its split serves the next one; one that cannot be reset (its task
     * was interrupted mid-fetch) is closed. */
    private void giveBack(KafkaConsumer<byte[], byte[]> consumer) {
        ConcurrentLinkedDeque<KafkaConsumer<byte[], byte[]>> idle = IDLE.computeIfAbsent(settings, key -> new ConcurrentLinkedDeque<>());
        try {
            consumer.unsubscribe();
        } catch (RuntimeException error) {
            LOG.info("a Kafka consumer is closed, not kept: {}", error.toString());
            consumer.close(CloseOptions.timeout(Duration.ZERO));
            return;
        }
        if (idle.size() < IDLE_PER_SETTINGS) {
            idle.addFirst(consumer);
        } else {
            consumer.close(CloseOptions.timeout(Duration.ZERO));
        }
    }

    /** One split's records, read lazily; the consumer goes back to the pool when they end. */
    private final class Records implements Iterator<InternalRow> {
        private final TopicPartition partition;
        private final long start;
        private final long end;
        private final String where;
        private final UTF8String topic;
        private KafkaConsumer<byte[], byte[]> consumer;
        private Iterator<ConsumerRecord<byte[], byte[]>> polled = Collections.emptyIterator();
        private InternalRow next;
        private boolean done;

        Records(TopicPartition partition, long start, long end) {
            this.partition = partition;
            this.start = start;
            this.end = end;
            this.where = partition.topic() + "-" + partition.partition() + " offsets [" + start + ", " + end + ")";
            this.topic = UTF8String.fromString(partition.topic());
        }

        @Override
        public boolean hasNext() {
            if (next == null && !done) {
                try {
                    if (consumer == null) {  // opened when first read: a task's splits take turns
                        consumer = borrow();
                        consumer.assign(List.of(partition));
                        consumer.seek(partition, start);
                    }
                    next = advance();
                } catch (RuntimeException error) {
                    discard();
                    throw error;
                }
                if (next == null) {
                    release();
                }
            }
            return next != null;
        }

        @Override
        public InternalRow next() {
            if (!hasNext()) {
                throw new NoSuchElementException(where);
            }
            InternalRow row = next;
            next = null;
            return row;
        }

        private InternalRow advance() {
            long waitedSince = System.currentTimeMillis();
            while (true) {
                if (polled.hasNext()) {
                    ConsumerRecord<byte[], byte[]> record = polled.next();
                    if (record.offset() >= end) {
                        done = true;
                        return null;
                    }
                    return row(record);
                }
                if (consumer.position(partition, Duration.ofMillis(readTimeoutMillis)) >= end) {
                    done = true;  // the last record, marker or aborted record before the end is past
                    return null;
                }
                try {
                    polled = consumer.poll(POLL).records(partition).iterator();
                } catch (OffsetOutOfRangeException error) {
                    outOfRange();
                    continue;
                }
                if (polled.hasNext()) {
                    waitedSince = System.currentTimeMillis();
                } else if (System.currentTimeMillis() - waitedSince >= readTimeoutMillis) {
                    throw new SourceReadError("no record of " + where + " for " + readTimeoutMillis / 1000
                        + "s: is the broker reachable?", null);
                }
            }
        }

        /** The split's start is no longer in the partition: deleted (retention, compaction), or
         * the offsets went back (the topic was recreated). */
        private void outOfRange() {
            long position = consumer.position(partition, Duration.ofMillis(readTimeoutMillis));
            long earliest = consumer.beginningOffsets(List.of(partition), Duration.ofMillis(readTimeoutMillis))
                .get(partition);
            if (earliest <= position) {
                throw new SourceReadError("offset " + position + " of " + where + " is past the partition's "
                    + "end: was the topic deleted and created again?", null);
            }
            String lost = "offsets [" + position + ", " + Math.min(earliest, end) + ") of " + where + " were deleted";
            if (failOnDataLoss) {
                throw new SourceReadError(lost + " before they were read (retention or compaction); set the "
                    + "source's failOnDataLoss to false to read on from the earliest offset", null);
            }
            LOG.warn("{} before they were read; reading on", lost);
            consumer.seek(partition, earliest);
        }

        private InternalRow row(ConsumerRecord<byte[], byte[]> record) {
            long millis = record.timestamp();
            return new GenericInternalRow(new Object[] {
                record.key(), record.value(), topic, partition.partition(), record.offset(),
                millis < 0 ? null : millis * 1000L, record.timestampType().id,
            });
        }

        /** Done, or the task ended: the consumer serves the next split. */
        void release() {
            if (consumer != null) {
                KafkaConsumer<byte[], byte[]> kept = consumer;
                consumer = null;
                giveBack(kept);
            }
        }

        /** A consumer that failed is closed, not reused. */
        private void discard() {
            if (consumer != null) {
                KafkaConsumer<byte[], byte[]> failed = consumer;
                consumer = null;
                done = true;
                failed.close(CloseOptions.timeout(Duration.ZERO));
            }
        }
    }
}
