"""Structured Streaming connectors: the split-reading stream source, the sinks' stream writers and
their commit hook."""
