"""``spec.application``'s dependencies as a manifest writes them: every problem names the entry,
the value and what is accepted; ``sha256`` names only listed URLs; the CRD bounds every list and
string; and a dependency change is an upgrade (it changes ``spec.revision``)."""

from __future__ import annotations

from typing import Any

import pytest

from finishable.api.application import ApplicationSpec, file_name, redacted, without_alias
from finishable.api.crd import build_crd
from finishable.api.spec import FinishableSparkJobSpec
from finishable.api.validation import InvalidManifest, parse_spec

pytestmark = pytest.mark.quick

DIGEST = "a" * 64


def problems(**application: Any) -> list[str]:
    try:
        parse_spec({"application": {"file": "job.py", **application}})
    except InvalidManifest as invalid:
        return [str(problem) for problem in invalid.problems]
    return []


def test_a_job_with_every_kind_of_dependency_is_accepted() -> None:
    written = {
        "pyFiles": ["local:///opt/app/lib.zip", "https://host/util.py", "helpers.egg"],
        "files": ["s3://bucket/lookup.csv", "file:///data/rates.json"],
        "archives": ["s3a://bucket/env.tar.gz#env", "gs://bucket/model.zip", "hdfs://nn/x.tgz"],
        "jars": ["local:///opt/jars/udf.jar", "https://host/udf-extra.jar"],
        "packages": ["org.apache.spark:spark-avro_2.13:4.0.0"],
        "repositories": ["https://repo.example/maven2", "file:///opt/m2"],
        "sha256": {"s3a://bucket/env.tar.gz": DIGEST.upper(), "job.py": DIGEST},
    }
    spec = FinishableSparkJobSpec.model_validate({"application": {"file": "job.py", **written}})
    assert spec.application.sha256 == {"s3a://bucket/env.tar.gz": DIGEST, "job.py": DIGEST}
    assert spec.application.entries()[0] == ("pyFiles[0]", "local:///opt/app/lib.zip")
    assert ("archives[0]", "s3a://bucket/env.tar.gz#env") in spec.application.entries()


@pytest.mark.parametrize(
    ("application", "expected"),
    [
        (
            {"archives": ["s3://b/env.tar.gz#env", "ftp://host/env.zip"]},
            "spec.application.archives[1]: 'ftp://host/env.zip' has the unknown scheme 'ftp'; "
            "use one of local, file, s3, s3a, gs, hdfs, http, https or a plain path",
        ),
        (
            {"archives": ["https://host/env.rar"]},
            "spec.application.archives[0]: 'https://host/env.rar' is not an archive Spark "
            "unpacks: use a .zip, .tar.gz, .tgz, .tar or .jar file",
        ),
        (
            {"archives": ["s3://b/env.zip#../up"]},
            "spec.application.archives[0]: 's3://b/env.zip#../up': the alias '../up' must be a "
            "directory name",
        ),
        (
            {"pyFiles": ["https://host/lib-1.0-py3-none-any.whl"]},
            "spec.application.pyFiles[0]: 'https://host/lib-1.0-py3-none-any.whl' is not "
            "something Python imports from: use a .py, .zip or .egg file",
        ),
        (
            {"files": ["s3://b/data.csv#name"]},
            "spec.application.files[0]: 's3://b/data.csv#name' has a '#' fragment; only "
            "archives take one",
        ),
        (
            {"jars": ["https://host/"]},
            "spec.application.jars[0]: 'https://host/' names no file",
        ),
        (
            {"files": ["s3://b/a,b.csv"]},
            "spec.application.files[0]: 's3://b/a,b.csv' holds a ',', which separates the "
            "entries of Spark's lists",
        ),
        (
            {"packages": ["org.apache.spark:spark-avro_2.13"]},
            "spec.application.packages[0]: 'org.apache.spark:spark-avro_2.13' is not a Maven "
            "coordinate: write groupId:artifactId:version",
        ),
        (
            {"repositories": ["s3://bucket/maven"]},
            "spec.application.repositories[0]: 's3://bucket/maven' is not a repository URL "
            "Spark's resolver reads: write http, https or file URLs",
        ),
        (
            {"archives": ["s3://b/env.zip"], "sha256": {"s3://b/env.zip": "abc"}},
            "spec.application.sha256.s3://b/env.zip: 'abc' is not a sha256 digest: 64 "
            "hexadecimal digits",
        ),
    ],
)
def test_a_problem_names_the_entry_the_value_and_what_is_accepted(
    application: dict[str, Any], expected: str
) -> None:
    found = problems(**application)
    assert len(found) == 1, found
    assert found[0].startswith(expected), found[0]


def test_sha256_names_only_urls_the_application_lists() -> None:
    archives = {"archives": ["s3://b/env.tar.gz#env"], "pyFiles": ["https://h/util.py"]}
    for listed in ("s3://b/env.tar.gz", "https://h/util.py", "job.py"):
        assert problems(**archives, sha256={listed: DIGEST}) == [], listed
    for unlisted in ("s3://b/env.tar.gz#env", "s3://b/other.zip", "util.py"):
        (problem,) = problems(**archives, sha256={unlisted: DIGEST})
        assert problem.startswith(f"spec.application.sha256: {unlisted} is not the URL of "), (
            problem
        )
        assert "an archive's without its #alias" in problem


def test_two_dependencies_of_one_name_in_a_task_directory_are_refused() -> None:
    (problem,) = problems(files=["s3://a/util.py"], pyFiles=["https://h/util.py"])
    assert problem.startswith(
        "spec.application: pyFiles[0] and files[0] are both named 'util.py' in the executors' "
        "working directory"
    ), problem
    (problem,) = problems(archives=["s3://a/env.zip#deps", "s3://b/env.tar.gz#deps"])
    assert "archives[0] and archives[1] are both named 'deps'" in problem
    assert problems(archives=["s3://a/env.zip#one", "s3://b/env.zip#two"]) == []
    assert problems(jars=["local:///a/udf.jar"], files=["s3://b/udf.jar"]) == []


def test_lists_and_strings_are_bounded_for_the_api_servers_rule_costs() -> None:
    (problem,) = problems(files=[f"s3://b/f{index}.csv" for index in range(65)])
    assert problem.startswith("spec.application.files: List should have at most 64 items"), problem
    application = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][
        "spec"
    ]["properties"]["application"]["properties"]
    for name in ("pyFiles", "files", "archives", "jars", "packages", "repositories"):
        field = application[name]
        assert field["maxItems"] and field["items"]["maxLength"], name
        assert field["description"], name
    assert application["sha256"]["maxProperties"]
    assert application["sha256"]["additionalProperties"]["pattern"] == "^[0-9a-fA-F]{64}$"
    assert application["packages"]["items"]["pattern"].startswith("^")
    assert application["file"]["maxLength"] == 2048


def test_a_dependency_change_is_an_upgrade() -> None:
    def revision(**application: Any) -> str:
        body = {"application": {"file": "job.py", **application}}
        return FinishableSparkJobSpec.model_validate(body).revision

    base = revision()
    unlisted = {"pyFiles": [], "archives": [], "packages": [], "repositories": [], "sha256": {}}
    assert revision(**unlisted) == base, "fields left empty do not upgrade running jobs"
    archive = {"archives": ["s3://b/env.tar.gz#env"]}
    changes: list[dict[str, Any]] = [
        {"pyFiles": ["https://h/util.py"]},
        archive,
        {"archives": ["s3://b/env.tar.gz#environment"]},
        {"packages": ["org.example:udfs:1.0"]},
        {**archive, "sha256": {"s3://b/env.tar.gz": DIGEST}},
    ]
    revisions = {revision(**change) for change in changes}
    assert base not in revisions and len(revisions) == len(changes)
    with_digest = {**archive, "sha256": {"s3://b/env.tar.gz": DIGEST}}
    other_digest = {**archive, "sha256": {"s3://b/env.tar.gz": "b" * 64}}
    assert revision(**with_digest) != revision(**other_digest)


def test_url_parts() -> None:
    assert without_alias("s3://b/env.tar.gz#env") == "s3://b/env.tar.gz"
    assert file_name("https://h/a/env.tar.gz?token=1#env") == "env.tar.gz"
    assert file_name("local:///opt/lib.zip") == "lib.zip"
    assert redacted("s3://key:secret@bucket/x.zip?e=1") == "s3://key:***@bucket/x.zip?e=1"
    assert redacted("https://user@host/x.zip") == "https://user@host/x.zip"
    assert ApplicationSpec.model_validate({"file": "a.py"}).entries() == []
