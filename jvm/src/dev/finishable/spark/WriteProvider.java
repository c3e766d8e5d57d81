package dev.finishable.spark;

import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** A provider of the project's writers (StageWrite, SinkWrite, KafkaWrite): it writes whatever
 * schema the DataFrame has, so it takes that schema and infers none. */
abstract class WriteProvider implements TableProvider {
    @Override
    public final StructType inferSchema(CaseInsensitiveStringMap options) {
        throw new UnsupportedOperationException("a finishable writer takes the DataFrame's schema");
    }

    @Override
    public final boolean supportsExternalMetadata() {
        return true;
    }
}
