"""What a program declares and what Spark runs for it: sources, sinks, Python data sources.

The declarations (``sources``, ``sinks``) are built in the driver; the data sources and writers
run in Spark's Python workers and executors, so they keep no state in memory and talk to the
driver only over HTTP (``finishable.transport``).
"""
