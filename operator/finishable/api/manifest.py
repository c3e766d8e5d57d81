"""A whole FinishableSparkJob manifest: ``apiVersion``, ``kind``, ``metadata``, spec and status.

What ``finishable validate`` and ``finishable run`` read from a file: the envelope around the
:mod:`spec <finishable.api.spec>` (and the :mod:`status <finishable.api.status>` when read back),
with the job name checked so that every child object name derived from it stays valid.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from finishable.api.models import (
    API_GROUP,
    API_VERSION,
    JOB_NAME_MAX_LENGTH,
    KIND,
    is_valid_job_name,
)
from finishable.api.spec import FinishableSparkJobSpec
from finishable.api.status import FinishableSparkJobStatus


class ObjectMeta(BaseModel):
    """The parts of metadata the project reads; everything else passes through untouched."""

    model_config = ConfigDict(extra="allow")

    name: str
    namespace: str | None = None
    generation: int | None = None
    uid: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _job_name(cls, value: str) -> str:
        if not is_valid_job_name(value):
            raise ValueError(
                f"{value!r} is not a valid job name: use at most {JOB_NAME_MAX_LENGTH} lowercase "
                "letters, digits and '-', starting with a letter and ending with a letter or digit "
                "(child objects such as <name>-shuffle-headless are derived from it)"
            )
        return value


class FinishableSparkJob(BaseModel):
    """A whole manifest: apiVersion, kind, metadata, spec (and status when read back)."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid")

    api_version: str = Field(alias="apiVersion")
    kind: str
    metadata: ObjectMeta
    spec: FinishableSparkJobSpec
    status: FinishableSparkJobStatus | None = None

    @field_validator("api_version")
    @classmethod
    def _api_version(cls, value: str) -> str:
        expected = f"{API_GROUP}/{API_VERSION}"
        if value != expected:
            raise ValueError(f"must be {expected!r}, got {value!r}")
        return value

    @field_validator("kind")
    @classmethod
    def _kind(cls, value: str) -> str:
        if value != KIND:
            raise ValueError(f"must be {KIND!r}, got {value!r}")
        return value
