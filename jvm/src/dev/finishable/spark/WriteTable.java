package dev.finishable.spark;

import java.util.Set;

import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.types.StructType;

/** A table the project's writers write (StageWrite, SinkWrite): the DataFrame's own schema,
 * whatever it is, under a name Spark shows in its plans. */
abstract class WriteTable implements SupportsWrite {
    private final String name;
    private final StructType schema;
    private final Set<TableCapability> capabilities;

    WriteTable(String name, StructType schema, Set<TableCapability> capabilities) {
        this.name = name;
        this.schema = schema;
        this.capabilities = capabilities;
    }

    @Override
    public String name() {
        return name;
    }

    @Override
    @SuppressWarnings("deprecation")  // columns() derives from it; Spark 4 still calls it
    public StructType schema() {
        return schema;
    }

    @Override
    public Set<TableCapability> capabilities() {
        return capabilities;
    }
}
