package dev.finishable.spark;

import java.io.IOException;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.spark.TaskContext;

/**
 * The round a Batch task runs in: the Spark local property {@code finishable.round} the driver
 * sets for each stage run (connectors/batch/datasources.py {@code Round}), and the task a slot
 * or partition runs in it.
 */
final class Rounds {
    static final String ROUND_PROPERTY = "finishable.round";

    private Rounds() {
    }

    static JsonNode current(TaskContext context) {
        String raw = context == null ? null : context.getLocalProperty(ROUND_PROPERTY);
        if (raw == null || raw.isEmpty()) {
            throw new BatchTaskError("this task runs outside a finishable batch round: run Batch "
                + "DataFrames through job.stage()/job.write() and job.run(), not with actions of their own");
        }
        try {
            return ReadOptions.JSON.readTree(raw);
        } catch (IOException error) {
            throw new BatchTaskError("the round property is not JSON: " + error);
        }
    }

    /** {@code tasks[slot]} for reader slots, the partition itself if listed else; null: idle. */
    static Integer taskOf(JsonNode round, int slot, boolean slotted) {
        JsonNode tasks = round.path("tasks");
        if (slotted) {
            return slot < tasks.size() ? tasks.get(slot).asInt() : null;
        }
        for (JsonNode task : tasks) {
            if (task.asInt() == slot) {
                return slot;
            }
        }
        return null;
    }

    /** The coordinator attempt of a task: unique per driver attempt, round and Spark attempt. */
    static int coordinatorAttempt(JsonNode round, TaskContext context) {
        int taskAttempt = Math.min(context.attemptNumber(), 9);
        return (round.path("attempt").asInt() * 100_000 + round.path("round").asInt()) * 10 + taskAttempt;
    }

    /** {@code {"stage", "task", "attempt"}}: what every runtime call about a task carries. */
    static ObjectNode taskBody(JsonNode round, int task, TaskContext context) {
        ObjectNode body = ReadOptions.JSON.createObjectNode();
        body.put("stage", round.path("stage").asText());
        body.put("task", task);
        body.put("attempt", coordinatorAttempt(round, context));
        return body;
    }
}
