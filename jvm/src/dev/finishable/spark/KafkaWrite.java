package dev.finishable.spark;

import java.io.IOException;
import java.io.Serializable;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.time.Duration;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicReference;

import com.fasterxml.jackson.core.type.TypeReference;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.utils.ProducerIdAndEpoch;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.SupportsTruncate;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.connector.write.streaming.StreamingDataWriterFactory;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;
import org.apache.spark.sql.internal.connector.SupportsStreamingUpdateAsAppend;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * {@code sinks.Kafka} written by Kafka's Java producer: the JVM twin of the Python writer
 * (connectors/kafka_writing.py, connectors/streaming/kafka_writer.py), so that the rows never
 * cross into Python.
 *
 * <p>Exactly once, phase one: each task writes its rows in one transaction of the id
 * {@code <prefix>-<output partition>} (opening it fences that id's earlier producer, so a retried
 * task aborts what the failed attempt left open), flushes, and leaves the transaction open: the
 * producer is closed without waiting, which abandons it on the broker rather than aborting it.
 * The task reports the transaction's producer id, epoch and transaction version. Phase two is the
 * driver's: the batch's commit sends them to {@code POST /v1/batches/N/publish}, where the
 * runtime records them and ends each with {@code EndTxn} (connectors/kafka_transactions.py), as
 * the Python writer's commit does. At least once, each task's records are delivered before it
 * ends.
 */
public final class KafkaWrite extends WriteProvider {
    private static final Logger LOG = LoggerFactory.getLogger(KafkaWrite.class);
    static final String EXACTLY_ONCE = "exactly-once";

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        Settings settings = Settings.of(properties);
        return new WriteTable("finishable_kafka_write__" + settings.sink, schema,
                EnumSet.of(TableCapability.STREAMING_WRITE, TableCapability.ACCEPT_ANY_SCHEMA)) {
            @Override
            public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
                return new Builder(info.schema(), settings);
            }
        };
    }

    /** What every writer of the sink needs (data source options; connectors/jvm.py). */
    static final class Settings implements Serializable {
        private static final long serialVersionUID = 1L;
        final String endpoint;
        final String token;
        final String sink;
        /** The sink's topic, or null: each row's {@code topic} column. */
        final String topic;
        final String delivery;
        final String prefix;
        /** The producer's settings in the Java client's names (connectors/kafka_java.py). */
        final Map<String, String> producer;

        private Settings(Map<String, String> options) {
            String what = "a finishable Kafka sink write";
            endpoint = ReadOptions.required(options, "endpoint", what);
            token = ReadOptions.required(options, "token", what);
            sink = ReadOptions.required(options, "sink", what);
            topic = options.get("topic");
            delivery = ReadOptions.required(options, "delivery", what);
            prefix = options.getOrDefault("prefix", "");
            try {
                producer = ReadOptions.JSON.readValue(ReadOptions.required(options, "producer", what),
                    new TypeReference<LinkedHashMap<String, String>>() {});
            } catch (IOException error) {
                throw new IllegalArgumentException(what + ": the option 'producer' is not a JSON object: "
                    + error, error);
            }
        }

        static Settings of(Map<String, String> options) {
            return new Settings(ReadOptions.known(options, "endpoint", "token", "sink", "topic", "delivery",
                "prefix", "producer"));
        }

        boolean exactlyOnce() {
            return EXACTLY_ONCE.equals(delivery);
        }
    }

    /** Complete and update modes write every row they are given, as Spark's Kafka sink does. */
    private static final class Builder implements SupportsTruncate, SupportsStreamingUpdateAsAppend {
        private final StructType schema;
        private final Settings settings;

        Builder(StructType schema, Settings settings) {
            this.schema = schema;
            this.settings = settings;
        }

        @Override
        public WriteBuilder truncate() {
            return this;
        }

        @Override
        public Write build() {
            return new Write() {
                @Override
                public StreamingWrite toStreaming() {
                    return new KafkaStreamingWrite(new Columns(schema), settings);
                }
            };
        }
    }

    /** Phase two goes to the driver; a failed batch's transactions are fenced at once. */
    private static final class KafkaStreamingWrite implements StreamingWrite {
        private final Columns columns;
        private final Settings settings;

        KafkaStreamingWrite(Columns columns, Settings settings) {
            this.columns = columns;
            this.settings = settings;
        }

        @Override
        public StreamingDataWriterFactory createStreamingWriterFactory(PhysicalWriteInfo info) {
            Columns written = columns;
            Settings kept = settings;
            return (partitionId, taskId, epochId) -> new TaskWriter(written, kept, partitionId);
        }

        @Override
        public boolean useCommitCoordinator() {
            return false;
        }

        @Override
        public void commit(long epochId, WriterCommitMessage[] messages) {
            ObjectNode body = ReadOptions.JSON.createObjectNode();
            body.put("sink", settings.sink);
            ArrayNode transactions = body.putArray("transactions");
            long records = 0;
            for (WriterCommitMessage message : messages) {
                if (message == null) {
                    throw new IllegalStateException("batch " + epochId + " of Kafka sink " + settings.sink
                        + " lacks a task's report");
                }
                Written written = (Written) message;
                records += written.records;
                if (written.transaction != null) {
                    transactions.add(written.transaction.json());
                }
            }
            body.put("records", records);
            new DriverCalls(settings.endpoint, settings.token).publish(epochId, body);
        }

        /** The batch failed: fence what its tasks reported (what they did not report is fenced by
         * the next attempt of their ids, or at the next start). */
        @Override
        public void abort(long epochId, WriterCommitMessage[] messages) {
            if (!settings.exactlyOnce()) {
                return;
            }
            for (WriterCommitMessage message : messages) {
                if (message instanceof Written && ((Written) message).transaction != null) {
                    String id = ((Written) message).transaction.transactionalId;
                    try (KafkaProducer<byte[], byte[]> fencing = producer(settings, id)) {
                        fencing.initTransactions();
                    } catch (RuntimeException error) {
                        LOG.warn("aborted batch {} of Kafka sink {}: {} stays open until the next start: {}",
                            epochId, settings.sink, id, error.toString());
                    }
                }
            }
        }
    }

    static KafkaProducer<byte[], byte[]> producer(Settings settings, String transactionalId) {
        Map<String, Object> config = new HashMap<>(settings.producer);
        if (transactionalId != null) {
            config.put("transactional.id", transactionalId);
        }
        config.put("enable.idempotence", "true");
        return new KafkaProducer<>(config, new ByteArraySerializer(), new ByteArraySerializer());
    }

    /** Where a row's record fields are: Spark's Kafka sink layout, checked by sinks.Kafka.check. */
    static final class Columns implements Serializable {
        private static final long serialVersionUID = 1L;
        final int key;
        final int value;
        final int topic;
        final int partition;
        final int headers;
        final boolean keyBinary;
        final boolean valueBinary;
        final int sentinel;

        Columns(StructType schema) {
            key = index(schema, "key");
            value = index(schema, "value");
            topic = index(schema, "topic");
            partition = index(schema, "partition");
            headers = index(schema, "headers");
            sentinel = index(schema, Sentinels.COLUMN);
            keyBinary = key >= 0 && binary(schema.fields()[key].dataType());
            valueBinary = value >= 0 && binary(schema.fields()[value].dataType());
            if (value < 0) {
                throw new IllegalArgumentException("a Kafka sink writes a 'value' column (binary or string)");
            }
        }

        private static int index(StructType schema, String name) {
            String[] names = schema.fieldNames();
            for (int position = 0; position < names.length; position++) {
                if (names[position].equals(name)) {
                    return position;
                }
            }
            return -1;
        }

        private static boolean binary(DataType type) {
            return type instanceof BinaryType;
        }

        byte[] bytes(InternalRow row, int column, boolean isBinary) {
            if (column < 0 || row.isNullAt(column)) {
                return null;
            }
            return isBinary ? row.getBinary(column) : row.getUTF8String(column).getBytes();
        }

        ProducerRecord<byte[], byte[]> record(InternalRow row, String defaultTopic) {
            String name = defaultTopic;
            if (name == null && topic >= 0 && !row.isNullAt(topic)) {
                name = row.getUTF8String(topic).toString();
            }
            if (name == null) {
                throw new IllegalArgumentException("a Kafka record has no topic: give the sink topic=..., or a "
                    + "'topic' column with no nulls");
            }
            Integer target = partition < 0 || row.isNullAt(partition) ? null : row.getInt(partition);
            List<Header> found = null;
            if (headers >= 0 && !row.isNullAt(headers)) {
                ArrayData array = row.getArray(headers);
                found = new ArrayList<>(array.numElements());
                for (int index = 0; index < array.numElements(); index++) {
                    InternalRow header = array.getStruct(index, 2);
                    byte[] value = header.isNullAt(1) ? new byte[0] : header.getBinary(1);
                    found.add(new RecordHeader(header.getUTF8String(0).toString(), value));
                }
            }
            return new ProducerRecord<>(name, target, null, bytes(row, key, keyBinary),
                bytes(row, value, valueBinary), found);
        }

        boolean isSentinel(InternalRow row) {
            return sentinel >= 0 && !row.isNullAt(sentinel) && row.getBoolean(sentinel);
        }
    }

    /** One task's records: a transaction left open (exactly once), or delivered (at least once). */
    private static final class TaskWriter implements DataWriter<InternalRow> {
        private final Columns columns;
        private final Settings settings;
        private final int partitionId;
        private final AtomicReference<Exception> failed = new AtomicReference<>();
        private KafkaProducer<byte[], byte[]> producer;
        private long records;

        TaskWriter(Columns columns, Settings settings, int partitionId) {
            this.columns = columns;
            this.settings = settings;
            this.partitionId = partitionId;
        }

        private String transactionalId() {
            return settings.prefix + "-" + partitionId;
        }

        @Override
        public void write(InternalRow row) {
            if (columns.isSentinel(row)) {
                return;  // a drain's marker row is the runtime's, not a record
            }
            Exception error = failed.get();
            if (error != null) {
                throw new IllegalStateException("Kafka refused a record: " + error, error);
            }
            if (producer == null) {
                producer = producer(settings, settings.exactlyOnce() ? transactionalId() : null);
                if (settings.exactlyOnce()) {
                    producer.initTransactions();
                    producer.beginTransaction();
                }
            }
            producer.send(columns.record(row, settings.topic), (metadata, exception) -> {
                if (exception != null) {
                    failed.compareAndSet(null, exception);
                }
            });
            records++;
        }

        @Override
        public WriterCommitMessage commit() {
            if (producer == null) {
                return new Written(null, 0);  // no rows: no transaction
            }
            producer.flush();
            Exception error = failed.get();
            if (error != null) {
                throw new IllegalStateException("Kafka refused records of " + transactionalId() + ": " + error,
                    error);
            }
            Opened opened = null;
            if (settings.exactlyOnce()) {
                opened = Opened.of(producer, transactionalId(), partitionId, records);
                producer.close(Duration.ZERO);  // abandoned, not aborted: the driver commits it
            } else {
                producer.close();
            }
            producer = null;
            return new Written(opened, records);
        }

        @Override
        public void abort() {
            if (producer != null) {
                KafkaProducer<byte[], byte[]> open = producer;
                producer = null;
                try {
                    if (settings.exactlyOnce()) {
                        open.abortTransaction();
                    }
                } catch (RuntimeException error) {  // fenced, or the broker is gone: the next attempt fences
                    LOG.warn("could not abort {}: {}", transactionalId(), error.toString());
                } finally {
                    open.close(Duration.ZERO);
                }
            }
        }

        @Override
        public void close() {
            abort();
        }
    }

    /** A task's report: its open transaction (null at least once, or with no rows). */
    private static final class Written implements WriterCommitMessage {
        private static final long serialVersionUID = 1L;
        final Opened transaction;
        final long records;

        Written(Opened transaction, long records) {
            this.transaction = transaction;
            this.records = records;
        }
    }

    /** A flushed, uncommitted transaction: connectors/kafka_transactions.py's OpenTransaction. */
    static final class Opened implements Serializable {
        private static final long serialVersionUID = 1L;
        final String transactionalId;
        final long producerId;
        final short epoch;
        final int version;
        final int partition;
        final long records;

        private Opened(String transactionalId, long producerId, short epoch, int version, int partition,
                long records) {
            this.transactionalId = transactionalId;
            this.producerId = producerId;
            this.epoch = epoch;
            this.version = version;
            this.partition = partition;
            this.records = records;
        }

        /** The producer's id and epoch, which the Java client keeps to itself: read from its
         * transaction manager (kafka-clients is pinned, docker/spark-jars.txt; Flink's Kafka sink
         * reads them the same way). Transaction version 2 (KIP-890) moves the epoch at each commit
         * and needs EndTxn v5; version 1 does not. */
        static Opened of(KafkaProducer<byte[], byte[]> producer, String transactionalId, int partition,
                long records) {
            try {
                Field field = KafkaProducer.class.getDeclaredField("transactionManager");
                field.setAccessible(true);
                Object manager = field.get(producer);
                Method ids = manager.getClass().getDeclaredMethod("producerIdAndEpoch");
                ids.setAccessible(true);
                ProducerIdAndEpoch current = (ProducerIdAndEpoch) ids.invoke(manager);
                Method v2 = manager.getClass().getMethod("isTransactionV2Enabled");
                int version = Boolean.TRUE.equals(v2.invoke(manager)) ? 2 : 1;
                return new Opened(transactionalId, current.producerId, current.epoch, version, partition, records);
            } catch (ReflectiveOperationException error) {
                throw new IllegalStateException("this Kafka client does not expose its transaction's producer "
                    + "id and epoch (kafka-clients is pinned in docker/spark-jars.txt): " + error, error);
            }
        }

        ObjectNode json() {
            ObjectNode node = ReadOptions.JSON.createObjectNode();
            node.put("transactional_id", transactionalId);
            node.put("producer_id", producerId);
            node.put("epoch", epoch);
            node.put("version", version);
            node.put("partition", partition);
            node.put("records", records);
            return node;
        }
    }
}
