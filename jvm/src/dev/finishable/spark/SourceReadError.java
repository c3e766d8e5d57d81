package dev.finishable.spark;

/** A split could not be read; the message names the file, its byte range and the format. */
public final class SourceReadError extends RuntimeException {
    private static final long serialVersionUID = 1L;

    SourceReadError(String message, Throwable cause) {
        super(message, cause);
    }
}
