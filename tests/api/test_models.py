"""The spec models: defaults, cross-field rules, the wire form."""

from typing import Any

import pytest

from finishable.api.crd import build_crd
from finishable.api.models import DesiredState, JobMode, StorageType, dump, is_valid_job_name
from finishable.api.spec import FinishableSparkJobSpec
from finishable.api.validation import InvalidManifest, parse_spec

pytestmark = pytest.mark.quick


def spec(**fields: Any) -> dict[str, Any]:
    return {"application": {"file": "job.py"}, **fields}


def problems(document: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(InvalidManifest) as caught:
        parse_spec(document)
    return {problem.path: problem.message for problem in caught.value.problems}


def test_defaults_follow_the_design() -> None:
    parsed = parse_spec(spec())
    assert parsed.mode is JobMode.STREAMING
    assert parsed.state is DesiredState.RUNNING
    assert parsed.checkpointing.interval.total_seconds() == 10
    assert parsed.checkpointing.storage.type is StorageType.CONFIG_MAP
    assert parsed.checkpointing.retained == 3
    assert parsed.recovery.max_attempts == 3
    assert parsed.recovery.previous_worker_recovery_timeout.total_seconds() == 30
    assert parsed.recovery.snapshot_min_pause.total_seconds() == 180
    assert parsed.recovery.event_store.write_buffer_size == 1024**2
    assert parsed.recovery.read_task_size == 64 * 1024**2
    assert parsed.executor.memory == 2 * 1024**3
    assert parsed.shuffle is None
    assert parsed.effective_shuffle.replicas == 2
    assert parsed.effective_shuffle.retain_timeout.total_seconds() == 300
    assert parsed.stop_timeout.total_seconds() == 600


def test_wire_form_round_trips() -> None:
    parsed = parse_spec(
        spec(mode="Batch", shuffle={"replicas": 3, "retainTimeout": "90s"}, driver={"memory": "2g"})
    )
    wire = dump(parsed)
    assert wire["shuffle"]["retainTimeout"] == "1m30s"
    assert wire["driver"]["memory"] == "2Gi"
    assert FinishableSparkJobSpec.model_validate(wire) == parsed


def test_shuffle_only_in_batch_mode() -> None:
    found = problems(spec(shuffle={"replicas": 2}))
    assert "spec.shuffle" in found
    assert "Batch" in found["spec.shuffle"]
    parse_spec(spec(mode="Batch", shuffle={"replicas": 2}))


def test_shuffle_settings_must_be_positive() -> None:
    found = problems(
        spec(mode="Batch", shuffle={"replicas": 0, "retainTimeout": "0s", "storage": {"size": "0"}})
    )
    assert set(found) == {
        "spec.shuffle.replicas",
        "spec.shuffle.retainTimeout",
        "spec.shuffle.storage.size",
    }


def test_the_read_task_size_is_a_positive_quantity() -> None:
    assert (
        parse_spec(spec(recovery={"readTaskSize": "16Mi"})).recovery.read_task_size == 16 * 1024**2
    )
    found = problems(spec(recovery={"readTaskSize": "0"}))
    assert "larger than zero" in found["spec.recovery.readTaskSize"]
    found = problems(spec(recovery={"readTaskSize": "lots"}))
    assert "'lots'" in found["spec.recovery.readTaskSize"]


def test_the_ttl_fields_are_durations_unset_by_default_and_0s_deletes_at_once() -> None:
    parsed = parse_spec(spec())
    assert (parsed.ttl_after_finished, parsed.ttl_after_failed) == (None, None)
    assert "ttlAfterFinished" not in dump(parsed), "unset: the operator's default applies"
    parsed = parse_spec(spec(ttlAfterFinished="24h", ttlAfterFailed="0s"))
    assert parsed.ttl_after_finished is not None and parsed.ttl_after_failed is not None
    assert parsed.ttl_after_finished.total_seconds() == 24 * 3600
    assert parsed.ttl_after_failed.total_seconds() == 0, "zero is allowed: at once"
    assert parse_spec(dump(parsed)) == parsed
    found = problems(spec(ttlAfterFinished="1 hour", ttlAfterFailed="-1h"))
    assert set(found) == {"spec.ttlAfterFinished", "spec.ttlAfterFailed"}
    assert "'1 hour' is not a duration" in found["spec.ttlAfterFinished"]
    assert "spec.ttlAfterFailed" in problems(spec(ttlAfterFailed=3600))


def test_the_ttl_fields_in_the_crd_are_optional_durations_kubectl_explains() -> None:
    schema = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    properties = schema["properties"]["spec"]["properties"]
    for field, phase in (("ttlAfterFinished", "Finished"), ("ttlAfterFailed", "Failed")):
        node = properties[field]
        assert node["type"] == "string" and "default" not in node
        assert node["pattern"] == properties["stopTimeout"]["pattern"]
        assert phase in node["description"] and "0s: at once" in node["description"]
    assert properties["ttlAfterFinished"]["description"].count("retainOnDelete") == 1
    status = schema["properties"]["status"]["properties"]
    assert status["expiresAt"]["format"] == "date-time"


def test_retained_at_least_one() -> None:
    assert "spec.checkpointing.retained" in problems(spec(checkpointing={"retained": 0}))


@pytest.mark.parametrize("url", ["s3://bucket/prefix", "gs://b/p", "file:///tmp/x", "hdfs://nn/x"])
def test_object_store_accepts_known_schemes(url: str) -> None:
    parsed = parse_spec(spec(checkpointing={"storage": {"type": "ObjectStore", "url": url}}))
    assert parsed.checkpointing.storage.url == url


def test_object_store_needs_a_url_with_a_known_scheme() -> None:
    missing = problems(spec(checkpointing={"storage": {"type": "ObjectStore"}}))
    assert "needs url" in missing["spec.checkpointing.storage"]
    unknown = problems(spec(checkpointing={"storage": {"type": "ObjectStore", "url": "ftp://x/y"}}))
    assert "ftp://x/y is not an object store URL" in unknown["spec.checkpointing.storage.url"]
    assert "s3" in unknown["spec.checkpointing.storage.url"]


def test_config_map_storage_takes_no_url() -> None:
    found = problems(spec(checkpointing={"storage": {"type": "ConfigMap", "url": "s3://b/p"}}))
    assert "ConfigMap takes no url" in found["spec.checkpointing.storage.url"]


def test_unknown_field_is_named_with_a_suggestion() -> None:
    found = problems(spec(executor={"instance": 3}))
    assert "did you mean 'instances'" in found["spec.executor.instance"]


def test_spark_conf_keys_must_be_spark_keys() -> None:
    found = problems(spec(application={"file": "a.py", "sparkConf": {"executor.memory": "1g"}}))
    assert "'executor.memory'" in found["spec.application.sparkConf"]


def test_application_scheme_is_checked() -> None:
    found = problems(spec(application={"file": "ftp://host/a.py"}))
    assert "unknown scheme 'ftp'" in found["spec.application.file"]
    parse_spec(spec(application={"file": "local:///opt/app/a.py"}))


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("clickstream", True),
        ("a", True),
        ("a-1", True),
        ("1a", False),
        ("A", False),
        ("a-", False),
        ("a" * 40, True),
        ("a" * 41, False),
        ("a_b", False),
    ],
)
def test_job_names(name: str, valid: bool) -> None:
    assert is_valid_job_name(name) is valid


def test_restore_from_takes_a_savepoint_or_a_snapshot_ref_not_both() -> None:
    assert parse_spec(spec(restoreFrom={"snapshotRef": "clicks-stop-7"})).restore_from.snapshot_ref
    found = problems(spec(restoreFrom={"savepoint": "s3://b/sp", "snapshotRef": "clicks-stop-7"}))
    message = found["spec.restoreFrom.snapshotRef"]
    assert "savepoint (s3://b/sp) and snapshotRef (clicks-stop-7) are both set" in message
