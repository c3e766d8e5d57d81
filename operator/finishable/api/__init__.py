"""Pydantic models of the FinishableSparkJob custom resource: the one source of the CRD schema."""
