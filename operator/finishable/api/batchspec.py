"""A Batch job's own settings: its shuffle pods and where the datasets it promotes are kept.

They are one thing because only a Batch run has them: the spec refuses ``shuffle`` in Streaming
mode, and a run keeps the shuffle pods it started with (``status.shuffleReplicas``).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import Field, field_validator

from finishable.api.models import OBJECT_STORE_SCHEMES, ApiModel
from finishable.api.pods import PodSettings, cpu_quantity
from finishable.api.podtemplate import SHUFFLE_PARTS, pod_rules
from finishable.api.units import Duration, Quantity, positive


class ShuffleStorageSpec(ApiModel):
    """The volume of each shuffle pod."""

    size: Quantity = Field(
        default=Quantity(10 * 1024**3), description="Volume size per shuffle pod, such as 10Gi."
    )
    storage_class_name: str | None = Field(
        default=None, description="StorageClass of the volume; the cluster default when unset."
    )

    @field_validator("size")
    @classmethod
    def _positive_size(cls, value: Quantity) -> Quantity:
        if value <= 0:
            raise ValueError("must be larger than zero")
        return value


class ShuffleSpec(PodSettings):
    """Shuffle pods that keep result partitions alive across driver crashes (Batch mode only)."""

    RULES = pod_rules(SHUFFLE_PARTS)

    replicas: int = Field(
        default=2,
        ge=1,
        le=100,
        description=(
            "Number of shuffle pods. Partitions are placed by pod, so a run keeps the number it "
            "started with: a change applies to the next run (status.shuffleReplicas)."
        ),
    )
    cores: str = Field(default="500m", description="CPU request of a shuffle pod.")
    memory: Quantity = Field(
        default=Quantity(512 * 1024**2), description="Memory of a shuffle pod (request and limit)."
    )
    storage: ShuffleStorageSpec = Field(
        default_factory=ShuffleStorageSpec, description="Volume of each shuffle pod."
    )
    retain_timeout: Duration = Field(
        default=Duration(minutes=5),
        description=(
            "How long shuffle pods keep a job's partitions after its driver stopped "
            "heartbeating; the reconnect window of a new driver attempt."
        ),
    )

    @field_validator("cores")
    @classmethod
    def _cores(cls, value: str) -> str:
        return cpu_quantity(value) or value

    @field_validator("retain_timeout")
    @classmethod
    def _positive_timeout(cls, value: Duration) -> Duration:
        return positive(value)


class ClusterPartitionsSpec(ApiModel):
    """Where the datasets a Batch job promotes (``job.stage(..., promote=True)``) are kept."""

    storage: str | None = Field(
        default=None,
        description=(
            "Partition storage: s3://bucket/prefix, gs://..., hdfs://... or file:///path (a "
            "directory locally). Unset: <checkpoint storage url>/cluster-partitions when the "
            "checkpoints are in object storage; a job that promotes without either fails."
        ),
    )
    ttl: Duration | None = Field(
        default=None,
        description="How long a cluster partition is kept; unset, until it is deleted.",
    )

    @field_validator("storage")
    @classmethod
    def _storage_url(cls, value: str | None) -> str | None:
        if value is None:
            return value
        scheme = urlsplit(value).scheme
        if scheme and len(scheme) > 1 and scheme not in (*OBJECT_STORE_SCHEMES, "local"):
            raise ValueError(
                f"{value!r} has the scheme {scheme!r}; partition storage accepts "
                f"{', '.join(OBJECT_STORE_SCHEMES)} (or a directory in local runs)"
            )
        return value

    @field_validator("ttl")
    @classmethod
    def _positive_ttl(cls, value: Duration | None) -> Duration | None:
        return None if value is None else positive(value)
