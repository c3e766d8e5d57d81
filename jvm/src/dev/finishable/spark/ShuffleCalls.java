package dev.finishable.spark;

import java.io.IOException;
import java.net.HttpURLConnection;
import java.net.URI;

/** Connections to a shuffle server's partition route ({@code /v1/partitions/{dataset}/{n}}), as
 * shuffle/client.py makes them: the bearer token, a 10 s connect and a 5 min read timeout. */
final class ShuffleCalls {
    private ShuffleCalls() {
    }

    /** @param query the query string without its '?' (empty: none) */
    static HttpURLConnection connect(String server, String dataset, int partition, String query,
            String token) throws IOException {
        String path = "/v1/partitions/" + DriverCalls.encode(dataset) + "/" + partition
            + (query.isEmpty() ? "" : "?" + query);
        HttpURLConnection connection =
            (HttpURLConnection) URI.create(server.replaceAll("/+$", "") + path).toURL().openConnection();
        connection.setConnectTimeout(10_000);
        connection.setReadTimeout(300_000);
        connection.setRequestProperty("Authorization", "Bearer " + token);
        connection.setRequestProperty("Accept", "application/json");
        return connection;
    }
}
