package dev.finishable.spark;

import java.io.Serializable;
import java.util.Map;

/**
 * What every streaming read tells its {@link SplitStream} (connectors/jvm.py sets them): where the
 * coordinator is, the run's attempt, and how a batch's splits are grouped into tasks, as the
 * Python reader groups them (group_splits).
 */
final class StreamOptions implements Serializable {
    private static final long serialVersionUID = 1L;
    static final String[] KEYS = {"coordinator", "endpoint", "token", "attempt", "maxSplitsPerBatch",
        "maxPartitionWeight", "openCost", "minPartitions", "splitSize"};

    final String coordinator;
    final String endpoint;
    final String token;
    /** The pinned run attempt (-1: the one the driver made ready). */
    final int attempt;
    final int maxSplitsPerBatch;
    final long maxPartitionWeight;
    final long openCost;
    final int minPartitions;
    /** Bytes (files) or offsets (Kafka) of one split, to translate Spark's byte limits. */
    final long splitSize;

    StreamOptions(Map<String, String> options, String what) {
        coordinator = ReadOptions.required(options, "coordinator", what);
        endpoint = ReadOptions.required(options, "endpoint", what);
        token = ReadOptions.required(options, "token", what);
        attempt = Integer.parseInt(options.getOrDefault("attempt", "-1"));
        maxSplitsPerBatch = Integer.parseInt(options.getOrDefault("maxSplitsPerBatch", "256"));
        maxPartitionWeight = Long.parseLong(options.getOrDefault("maxPartitionWeight", "134217728"));
        openCost = Long.parseLong(options.getOrDefault("openCost", "4194304"));
        minPartitions = Integer.parseInt(options.getOrDefault("minPartitions", "1"));
        splitSize = Long.parseLong(options.getOrDefault("splitSize", "0"));
    }
}
