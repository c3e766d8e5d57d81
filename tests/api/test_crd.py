"""The generated CRD: committed file equals the generator, and the schema is structural."""

import itertools
from pathlib import Path
from typing import Any

import pytest
import yaml

from finishable.api.crd import (
    CRD_FILE,
    SNAPSHOT_CRD_FILE,
    build_crd,
    build_snapshot_crd,
    render_crd,
    render_snapshot_crd,
)
from finishable.api.models import Phase
from finishable.api.spec import FinishableSparkJobSpec

pytestmark = pytest.mark.quick

ROOT = Path(__file__).resolve().parents[2]


def test_committed_crd_equals_generated() -> None:
    committed = (ROOT / CRD_FILE).read_text(encoding="utf-8")
    assert committed == render_crd(), (
        "crds/ drifted from finishable.api.models: run `make crd` and commit the result"
    )
    committed = (ROOT / SNAPSHOT_CRD_FILE).read_text(encoding="utf-8")
    assert committed == render_snapshot_crd(), (
        "crds/ drifted from finishable.api.snapshot: run `make crd` and commit the result"
    )


def walk(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    nodes = [(path, node)]
    for name, child in node.get("properties", {}).items():
        nodes += walk(child, f"{path}.{name}")
    if "items" in node:
        nodes += walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        nodes += walk(node["additionalProperties"], f"{path}{{}}")
    return nodes


def schema() -> dict[str, Any]:
    version = build_crd()["spec"]["versions"][0]
    return version["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


def test_schema_is_structural() -> None:
    forbidden = {"$ref", "anyOf", "allOf", "oneOf", "$defs", "title"}
    for path, node in walk(schema()):
        assert "type" in node or node.get("x-kubernetes-int-or-string"), f"{path} has no type"
        assert not forbidden & node.keys(), f"{path} uses {forbidden & node.keys()}"
        assert not ("properties" in node and "additionalProperties" in node), path


def test_every_spec_and_status_field_is_described() -> None:
    for path, node in walk(schema()):
        if path.startswith((".spec", ".status")) and not path.endswith(("[]", "{}")):
            assert node.get("description"), f"{path} has no description"


def test_descriptions_break_lines_only_between_paragraphs_and_items() -> None:
    """``kubectl explain`` prints a description's newlines as they are: a docstring's wrapped
    lines would break its sentences mid-way there."""
    for crd in (build_crd(), build_snapshot_crd()):
        root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for path, node in walk(root):
            lines = str(node.get("description", "")).split("\n")
            for before, line in itertools.pairwise(lines):
                assert not before or not line or line.startswith("- "), (
                    f"{crd['metadata']['name']} {path or '.'}: a sentence broken at {before!r}"
                )


def test_defaults_are_valid_for_their_nodes() -> None:
    for path, node in walk(schema()):
        if "default" in node and node["type"] == "object":
            assert "required" not in node, f"{path}: an object default with required fields"
    spec_node = schema()["properties"]["spec"]
    assert "default" not in spec_node["properties"]["shuffle"], "shuffle must stay unset by default"
    assert "default" not in spec_node["properties"]["application"]
    for path, node in walk(schema()["properties"]["status"]):
        assert "default" not in node, f"status{path} has a default; status is operator-written"


def test_enums_bounds_and_version() -> None:
    crd = build_crd()
    version = crd["spec"]["versions"][0]
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["spec"]["group"] == "finishable.dev"
    assert crd["spec"]["names"]["shortNames"] == ["fsj"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}
    spec_props = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert spec_props["mode"]["enum"] == ["Streaming", "Batch"]
    assert spec_props["state"]["enum"] == ["Running", "Suspended", "Finished"]
    assert spec_props["checkpointing"]["properties"]["retained"]["minimum"] == 1
    assert spec_props["shuffle"]["properties"]["replicas"]["minimum"] == 1
    assert spec_props["stopTimeout"]["pattern"].startswith("^")
    status_props = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert status_props["phase"]["enum"] == [phase.value for phase in Phase]


def test_printer_columns() -> None:
    columns = build_crd()["spec"]["versions"][0]["additionalPrinterColumns"]
    shown = [column["name"] for column in columns if not column.get("priority")]
    assert shown == ["Phase", "State", "Checkpoint", "Attempt", "Age"]


def test_schema_defaults_parse_with_the_models() -> None:
    """What the API server fills in from the schema defaults is a spec the models accept."""

    def defaults(node: dict[str, Any]) -> Any:
        if node["type"] == "object" and "properties" in node:
            return {
                name: defaults(child)
                for name, child in node["properties"].items()
                if "default" in child or name == "application"
            }
        return node.get("default")

    spec_node = schema()["properties"]["spec"]
    filled = defaults(spec_node)
    filled["application"] = {"file": "job.py"}
    parsed = FinishableSparkJobSpec.model_validate(filled)
    assert parsed == FinishableSparkJobSpec.model_validate({"application": {"file": "job.py"}})


def test_rendered_yaml_parses_back() -> None:
    assert yaml.safe_load(render_crd()) == build_crd()


def snapshot_schema() -> dict[str, Any]:
    version = build_snapshot_crd()["spec"]["versions"][0]
    return version["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


def test_snapshot_crd_names_columns_and_schema() -> None:
    crd = build_snapshot_crd()
    assert crd["metadata"]["name"] == "finishablesparksnapshots.finishable.dev"
    names = crd["spec"]["names"]
    assert (names["kind"], names["shortNames"]) == ("FinishableSparkSnapshot", ["fsjsnap"])
    assert crd["spec"]["group"] == build_crd()["spec"]["group"]
    assert crd["spec"]["scope"] == "Namespaced"
    version = crd["spec"]["versions"][0]
    assert version["name"] == build_crd()["spec"]["versions"][0]["name"]
    assert version["subresources"] == {"status": {}}
    shown = [column["name"] for column in version["additionalPrinterColumns"]]
    assert shown == ["Job", "Trigger", "State", "Id", "Drained", "Location", "Age"]
    forbidden = {"$ref", "anyOf", "allOf", "oneOf", "$defs", "title"}
    for path, node in walk(snapshot_schema()):
        assert "type" in node or node.get("x-kubernetes-int-or-string"), f"{path} has no type"
        assert not forbidden & node.keys(), f"{path} uses {forbidden & node.keys()}"
        if path.startswith((".spec", ".status")) and not path.endswith(("[]", "{}")):
            assert node.get("description"), f"{path} has no description"
    for path, node in walk(snapshot_schema()["properties"]["status"]):
        assert "default" not in node, f"status{path} has a default; status is operator-written"
    status = snapshot_schema()["properties"]["status"]["properties"]
    assert status["state"]["enum"] == ["Pending", "InProgress", "Completed", "Failed", "Abandoned"]
    assert yaml.safe_load(render_snapshot_crd()) == crd
