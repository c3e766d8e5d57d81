"""Tests of the driver: the job API, the streaming and batch executors, checkpoints, savepoints."""
