"""Tests of the connectors: sources, sinks, the Python data sources and staging."""
