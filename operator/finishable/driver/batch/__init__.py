"""Batch jobs in the driver: stage planning and recovery (pure), and the runtime that runs them."""
