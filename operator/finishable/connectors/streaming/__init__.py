"""Structured Streaming connectors: the split-reading stream source and the sink's commit hook."""
