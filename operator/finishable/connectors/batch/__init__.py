"""Batch connectors: reader slots, stage writers and readers, sink writers run in Batch rounds."""
