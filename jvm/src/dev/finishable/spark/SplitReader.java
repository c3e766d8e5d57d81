package dev.finishable.spark;

import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.function.BiConsumer;

import com.fasterxml.jackson.databind.JsonNode;
import org.apache.spark.TaskContext;
import org.apache.spark.TaskKilledException;
import org.apache.spark.paths.SparkPath;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.execution.datasources.PartitionedFile;
import org.apache.spark.unsafe.types.UTF8String;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import scala.Function1;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Reads one file split (a coordinator's {@code {"kind": "file", "url", "start", "length",
 * "file_size"}}) with Spark's format reader, as connectors/reading.py reads it in Python: rows of
 * the data columns, then the partition columns a {@code key=value} directory gives (as text). An
 * unreadable split fails with an error naming it, or, when skipping is on, is reported and read as
 * no rows (read whole first, so a skipped split leaves no partial rows behind).
 */
final class SplitReader implements SplitRows {
    private static final long serialVersionUID = 1L;
    private static final String HIVE_NULL = "__HIVE_DEFAULT_PARTITION__";
    private static final Logger LOG = LoggerFactory.getLogger(SplitReader.class);

    private final ReadOptions options;
    private final Function1<PartitionedFile, scala.collection.Iterator<InternalRow>> formatReader;

    SplitReader(ReadOptions options,
            Function1<PartitionedFile, scala.collection.Iterator<InternalRow>> formatReader) {
        this.options = options;
        this.formatReader = formatReader;
    }

    /** The split's rows; {@code skipped(splitId, reason)} is called for a split skipped. */
    @Override
    public Iterator<InternalRow> rows(JsonNode split, BiConsumer<String, String> skipped) {
        if (!"file".equals(split.path("kind").asText())) {
            throw new IllegalStateException("the JVM file reader got a split of kind " + split.path("kind"));
        }
        String url = split.path("url").asText();
        String hadoopUrl = hadoopUrl(url);
        long start = split.path("start").asLong();
        long length = split.path("length").asLong();
        long size = split.path("file_size").asLong();
        String described = start == 0 && length == size ? hadoopUrl
            : hadoopUrl + " bytes [" + start + ", " + (start + length) + ")";
        PartitionedFile file = PartitionedFile.apply(partitionValues(url), SparkPath.fromUrlString(hadoopUrl),
            start, length, new String[0], 0L, size, PartitionedFile.apply$default$8());
        try {
            Iterator<InternalRow> opened = new Failing(open(file, described), described);
            if (!options.skipUnreadable) {
                return opened;
            }
            List<InternalRow> whole = new ArrayList<>();
            while (opened.hasNext()) {
                whole.add(opened.next().copy());
            }
            return whole.iterator();
        } catch (SourceReadError error) {
            if (!options.skipUnreadable) {
                throw error;
            }
            LOG.warn("skipping an unreadable split: {}", error.getMessage());
            skipped.accept(split.path("id").asText(), error.getMessage());
            return Collections.emptyIterator();
        }
    }

    /** The format reader opened on the split (parquet reads its footer here). */
    private Iterator<InternalRow> open(PartitionedFile file, String described) {
        try {
            return CollectionConverters.asJava(formatReader.apply(file));
        } catch (Exception error) {  // Scala throws checked ones too (IOException)
            throw failure(described, error);
        }
    }

    /** The split's SourceReadError; a task being killed stays what it is (Spark's cancel), so
     * that it is never taken for an unreadable split and skipped. */
    private RuntimeException failure(String described, Exception error) {
        TaskContext context = TaskContext.get();
        boolean killed = error instanceof TaskKilledException || error instanceof InterruptedException
            || error instanceof java.io.InterruptedIOException
            || error instanceof java.nio.channels.ClosedByInterruptException
            || (context != null && context.isInterrupted());
        if (killed) {
            return SplitReader.<RuntimeException>rethrow(error);
        }
        return new SourceReadError(reason(described, error), error);
    }

    @SuppressWarnings("unchecked")
    private static <T extends Throwable> RuntimeException rethrow(Throwable error) throws T {
        throw (T) error;
    }

    private String reason(String described, Throwable error) {
        Throwable root = error;
        while (root.getCause() != null && root.getCause() != root) {
            root = root.getCause();
        }
        return "cannot read " + described + " as " + options.format + ": "
            + root.getClass().getSimpleName() + ": " + root.getMessage();
    }

    /** Rows of a split; any failure while reading becomes a SourceReadError naming the split. */
    private final class Failing implements Iterator<InternalRow> {
        private final Iterator<InternalRow> inner;
        private final String described;

        Failing(Iterator<InternalRow> inner, String described) {
            this.inner = inner;
            this.described = described;
        }

        @Override
        public boolean hasNext() {
            try {
                return inner.hasNext();
            } catch (Exception error) {  // Scala throws checked ones too (IOException)
                throw failure(described, error);
            }
        }

        @Override
        public InternalRow next() {
            try {
                return inner.next();
            } catch (Exception error) {  // Scala throws checked ones too (IOException)
                throw failure(described, error);
            }
        }
    }

    /** Where Hadoop finds a split's file: an {@code s3://KEY:SECRET@bucket/key?endpoint_override=..}
     * URL (pyarrow's, as the coordinator lists it) is {@code s3a://bucket/key}, its store and keys
     * given to that bucket's settings (ReadOptions.hadoopConf); other URLs are Hadoop's already. */
    static String hadoopUrl(String url) {
        if (!url.startsWith("s3://")) {
            return url;
        }
        String rest = url.substring("s3://".length()).split("\\?", 2)[0];
        int slash = rest.indexOf('/');
        String authority = slash < 0 ? rest : rest.substring(0, slash);
        String path = slash < 0 ? "" : rest.substring(slash);
        return "s3a://" + authority.substring(authority.lastIndexOf('@') + 1) + path;
    }

    /** The {@code key=value} directories between the source's URL and the file, as Spark
     * escapes partition paths (coordinator/files.py partition_values); Hive's default is null. */
    private InternalRow partitionValues(String url) {
        int count = options.partitionColumns.size();
        Object[] values = new Object[count];
        String root = options.root.split("\\?", 2)[0].replaceAll("/+$", "") + "/";
        String path = url.split("\\?", 2)[0];
        if (count > 0 && path.startsWith(root)) {
            String[] directories = unquote(path.substring(root.length())).split("/", -1);
            for (int index = 0; index < directories.length - 1; index++) {
                int equals = directories[index].indexOf('=');
                if (equals <= 0) {
                    continue;
                }
                int column = options.partitionColumns.indexOf(unquote(directories[index].substring(0, equals)));
                String text = unquote(directories[index].substring(equals + 1));
                if (column >= 0) {
                    values[column] = HIVE_NULL.equals(text) ? null : UTF8String.fromString(text);
                }
            }
        }
        return new GenericInternalRow(values);
    }

    /** The rows of several iterators, one after the other. */
    static Iterator<InternalRow> concat(List<Iterator<InternalRow>> parts) {
        if (parts.size() == 1) {
            return parts.get(0);
        }
        Iterator<Iterator<InternalRow>> each = parts.iterator();
        return new Iterator<InternalRow>() {
            private Iterator<InternalRow> part = Collections.emptyIterator();

            @Override
            public boolean hasNext() {
                while (!part.hasNext() && each.hasNext()) {
                    part = each.next();
                }
                return part.hasNext();
            }

            @Override
            public InternalRow next() {
                hasNext();
                return part.next();
            }
        };
    }

    /** Percent-decoding as Python's urllib.parse.unquote does it ('+' stays '+'). */
    static String unquote(String text) {
        if (text.indexOf('%') < 0) {
            return text;
        }
        java.io.ByteArrayOutputStream bytes = new java.io.ByteArrayOutputStream();
        StringBuilder out = new StringBuilder();
        for (int index = 0; index < text.length(); index++) {
            char c = text.charAt(index);
            if (c == '%' && index + 2 < text.length()
                    && Character.digit(text.charAt(index + 1), 16) >= 0
                    && Character.digit(text.charAt(index + 2), 16) >= 0) {
                bytes.write(Integer.parseInt(text.substring(index + 1, index + 3), 16));
                index += 2;
                continue;
            }
            if (bytes.size() > 0) {
                out.append(new String(bytes.toByteArray(), StandardCharsets.UTF_8));
                bytes.reset();
            }
            out.append(c);
        }
        if (bytes.size() > 0) {
            out.append(new String(bytes.toByteArray(), StandardCharsets.UTF_8));
        }
        return out.toString();
    }
}
