"""Driver side: the FinishableJob API, PySpark sources and sinks, executors, control channel."""
