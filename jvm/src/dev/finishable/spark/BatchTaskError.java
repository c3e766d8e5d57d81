package dev.finishable.spark;

/** A Batch task cannot go on: no round, the driver refused it or cannot be reached. */
public final class BatchTaskError extends RuntimeException {
    private static final long serialVersionUID = 1L;

    BatchTaskError(String message) {
        super(message);
    }
}
