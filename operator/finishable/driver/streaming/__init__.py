"""Streaming jobs in the driver: the FLIP-147 executor, checkpoints and the savepoint format."""
