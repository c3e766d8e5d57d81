"""Durable state: snapshot stores (ConfigMap, object storage, local dir), the job event store."""
