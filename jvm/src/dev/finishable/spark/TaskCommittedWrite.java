package dev.finishable.spark;

import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.WriterCommitMessage;

/** A Batch write whose commit is each task's own {@code task-finished} (StageWrite, SinkWrite):
 * the driver accepts one attempt per task, so nothing is left for Spark's job commit. */
abstract class TaskCommittedWrite implements BatchWrite {
    @Override
    public boolean useCommitCoordinator() {
        return false;
    }

    @Override
    public void commit(WriterCommitMessage[] messages) {
    }

    @Override
    public void abort(WriterCommitMessage[] messages) {
    }
}
