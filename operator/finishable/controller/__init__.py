"""The kopf operator: thin handlers, pure child-object builders, the one status writer, metrics."""
