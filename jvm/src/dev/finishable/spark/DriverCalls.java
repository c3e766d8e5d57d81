package dev.finishable.spark;

import java.io.IOException;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.UUID;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

/**
 * Calls from a reader task to its driver's endpoint, as connectors/driver_calls.py and
 * coordinator/client.py make them: JSON with the bearer token, retried with backoff while the
 * driver cannot be reached (a restarting driver comes back). An answer is final, except a
 * coordinator's 5xx that does not say it is not retryable.
 */
final class DriverCalls {
    private static final HttpClient CLIENT = HttpClient.newBuilder()
        .version(HttpClient.Version.HTTP_1_1)
        .connectTimeout(Duration.ofSeconds(10))
        .build();

    private final String endpoint;
    private final String token;

    DriverCalls(String endpoint, String token) {
        this.endpoint = endpoint.replaceAll("/+$", "");
        this.token = token;
    }

    /** {@code POST /v1/runtime/{action}}: task-start, task-read. */
    JsonNode runtime(String action, ObjectNode body) {
        return post("/v1/runtime/" + action, body, Duration.ofSeconds(300), 60.0, false, action);
    }

    /** {@code POST /v1/batches/{batch}/publish}: a streaming sink's micro-batch, staged by every
     * task, published by the driver between the runtime's prepare and published steps. */
    JsonNode publish(long batchId, ObjectNode body) {
        return post("/v1/batches/" + batchId + "/publish", body, Duration.ofSeconds(600), 60.0, false,
            "the publish of batch " + batchId);
    }

    /** Send a reader event to a coordinator; the events it sends back. */
    JsonNode coordinatorEvent(String coordinator, int subtask, int attempt, ObjectNode event) {
        ObjectNode body = ReadOptions.JSON.createObjectNode();
        body.set("event", event);
        body.put("request_id", UUID.randomUUID().toString().replace("-", ""));
        String path = "/v1/coordinators/" + encode(coordinator) + "/subtasks/" + subtask + "/attempts/" + attempt + "/events";
        JsonNode reply = post(path, body, Duration.ofSeconds(10), 60.0, true, event.path("type").asText());
        JsonNode events = reply.get("events");
        if (events == null || !events.isArray()) {
            throw new BatchTaskError("coordinator " + coordinator + " answered without an events array");
        }
        return events;
    }

    /** {@code GET /v1/coordinators/{name}}: a coordinator's progress (its live attempts). */
    JsonNode progress(String coordinator) {
        return send(HttpRequest.newBuilder(URI.create(endpoint + "/v1/coordinators/" + encode(coordinator)))
            .timeout(Duration.ofSeconds(10)).GET(), 60.0, true, "progress");
    }

    /** A path segment or query value, percent-encoded as Python's quote(..., safe='') does. */
    static String encode(String text) {
        return URLEncoder.encode(text, StandardCharsets.UTF_8).replace("+", "%20");
    }

    private JsonNode post(String path, ObjectNode body, Duration timeout, double patience,
            boolean retryServerErrors, String what) {
        byte[] data;
        try {
            data = ReadOptions.JSON.writeValueAsBytes(body);
        } catch (IOException error) {
            throw new BatchTaskError("cannot encode " + what + ": " + error);
        }
        return send(HttpRequest.newBuilder(URI.create(endpoint + path)).timeout(timeout)
            .header("Content-Type", "application/json")
            .POST(HttpRequest.BodyPublishers.ofByteArray(data)), patience, retryServerErrors, what);
    }

    private JsonNode send(HttpRequest.Builder builder, double patience, boolean retryServerErrors, String what) {
        HttpRequest request = builder
            .header("Authorization", "Bearer " + token)
            .header("Accept", "application/json")
            .build();
        long giveUpAt = System.nanoTime() + (long) (patience * 1e9);
        long delayMillis = 200;
        while (true) {
            String problem;
            try {
                HttpResponse<byte[]> response = CLIENT.send(request, HttpResponse.BodyHandlers.ofByteArray());
                int status = response.statusCode();
                if (status >= 200 && status < 300) {
                    byte[] answer = response.body();
                    return answer.length == 0 ? ReadOptions.JSON.createObjectNode()
                        : ReadOptions.JSON.readTree(answer);
                }
                Refusal refusal = Refusal.of(response.body());
                if (!(retryServerErrors && status >= 500 && refusal.retryable)) {
                    throw new BatchTaskError("the driver refused " + what + ": HTTP " + status + ": "
                        + refusal.message);
                }
                problem = "HTTP " + status + ": " + refusal.message;
            } catch (IOException error) {
                problem = error.toString();
            } catch (InterruptedException error) {
                Thread.currentThread().interrupt();
                throw new BatchTaskError("interrupted while calling the driver (" + what + ")");
            }
            if (System.nanoTime() + delayMillis * 1_000_000L > giveUpAt) {
                throw new BatchTaskError("the driver at " + endpoint + " did not answer " + what + ": " + problem);
            }
            try {
                Thread.sleep(delayMillis);
            } catch (InterruptedException error) {
                Thread.currentThread().interrupt();
                throw new BatchTaskError("interrupted while calling the driver (" + what + ")");
            }
            delayMillis = Math.min(2000, delayMillis * 2);
        }
    }

    /** An error answer of our servers: {@code {"error", "kind", "retryable"}}, or plain text. */
    private static final class Refusal {
        final String message;
        final boolean retryable;

        private Refusal(String message, boolean retryable) {
            this.message = message;
            this.retryable = retryable;
        }

        static Refusal of(byte[] body) {
            try {
                JsonNode payload = ReadOptions.JSON.readTree(body);
                if (payload != null && payload.hasNonNull("error")) {
                    return new Refusal(payload.get("error").asText(), payload.path("retryable").asBoolean(true));
                }
            } catch (IOException notJson) {
                // the text itself, below
            }
            String text = new String(body, StandardCharsets.UTF_8);
            return new Refusal(text.length() > 500 ? text.substring(0, 500) : text, true);
        }
    }
}
