"""Streaming jobs in the driver: the FLIP-147 executor, the batch-boundary stop, checkpoints and
the savepoint format."""
