"""The emulator answers as a real API server (v1.33-1.36) does where a lenient one would let a
client's mistake through: query-parameter types and enumerations, a CRD's structural schema
(pruning, defaulting, field validation) and resourceVersion conflicts. Every request goes over
HTTP; every test names the server behaviour it mirrors and checks the server's status, reason
and message text."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple
from urllib.parse import urlencode

import pytest
import urllib3

from finishable.api.crd import build_crd
from testcluster.apiserver.emulator import REFUSALS_PATH, EmulatorServer

pytestmark = pytest.mark.quick

NS = "strict"
GROUP = "strict.test"
WIDGETS = f"/apis/{GROUP}/v1/namespaces/{NS}/widgets"
JOBS = f"/apis/finishable.dev/v1alpha1/namespaces/{NS}/finishablesparkjobs"
CONFIGMAPS = f"/api/v1/namespaces/{NS}/configmaps"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"

WIDGET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "properties": {
                "size": {"type": "integer", "default": 3},
                "mode": {"type": "string", "default": "fast"},
                "nested": {
                    "type": "object",
                    "default": {},
                    "properties": {"level": {"type": "string", "default": "deep"}},
                },
                "ports": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string"},
                            "protocol": {"type": "string", "default": "TCP"},
                        },
                    },
                },
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "optional": {
                    "type": "object",
                    "properties": {"x": {"type": "string", "default": "y"}},
                },
            },
        },
        "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
    },
}


class Answer(NamedTuple):
    status: int
    body: Any
    warnings: list[str]

    @property
    def message(self) -> str:
        return str(self.body.get("message", ""))

    @property
    def reason(self) -> str:
        return str(self.body.get("reason", ""))


class Client:
    def __init__(self, url: str) -> None:
        self.url = url
        self.pool = urllib3.PoolManager()

    def __call__(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: Mapping[str, str] | list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
        raw: bytes | None = None,
        agent: str = "strict-test/1.0",
    ) -> Answer:
        url = self.url + path + (f"?{urlencode(query)}" if query else "")
        payload = (
            raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        )
        headers = {"User-Agent": agent, "Accept": "application/json"}
        if payload is not None:
            headers["Content-Type"] = content_type
        response = self.pool.request(method, url, body=payload, headers=headers, retries=False)
        lines = response.data.splitlines()
        if len(lines) > 1:  # a watch: one event per line
            return Answer(response.status, [json.loads(line) for line in lines], [])
        data = json.loads(response.data) if response.data else None
        return Answer(response.status, data, response.headers.getlist("Warning"))


@pytest.fixture(scope="module")
def server() -> Iterator[EmulatorServer]:
    with EmulatorServer() as server:
        yield server


@pytest.fixture(scope="module")
def k8s(server: EmulatorServer) -> Client:
    client = Client(server.url)
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": WIDGET_SCHEMA},
                    "subresources": {"status": {}},
                }
            ],
        },
    }
    crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    assert client("POST", crds, crd).status == 201
    assert client("POST", crds, build_crd()).status == 201
    assert client("POST", "/api/v1/namespaces", {"metadata": {"name": NS}}).status == 201
    return client


def widget(name: str, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": spec if spec is not None else {},
    }


def job(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "finishable.dev/v1alpha1",
        "kind": "FinishableSparkJob",
        "metadata": {"name": name},
        "spec": spec,
    }


# -- query parameters ---------------------------------------------------------------------------


def test_int64_parameters_parse_like_go_strconv(k8s: Client) -> None:
    """ListOptions.timeoutSeconds and limit, DeleteOptions.gracePeriodSeconds: apimachinery's
    ``Convert_Slice_string_To_Pointer_int64`` / ``_To_int64`` use ``strconv.ParseInt(s, 10, 64)``
    and the handler answers its error as 400 BadRequest (what killed kopf's ``300.0`` watch)."""
    watch = k8s("GET", CONFIGMAPS, query={"watch": "true", "timeoutSeconds": "300.0"})
    assert watch.status == 400
    assert watch.reason == "BadRequest"
    assert watch.message == 'strconv.ParseInt: parsing "300.0": invalid syntax'
    listing = k8s("GET", CONFIGMAPS, query={"limit": "99999999999999999999"})
    assert listing.status == 400
    assert listing.message == 'strconv.ParseInt: parsing "99999999999999999999": value out of range'
    for bad in ("1e3", " 5", "", "0x10", "5s"):
        answer = k8s("GET", CONFIGMAPS, query={"limit": bad})
        assert answer.status == 400, bad
        assert answer.message == f'strconv.ParseInt: parsing "{bad}": invalid syntax'
    assert k8s("POST", CONFIGMAPS, {"metadata": {"name": "grace"}}).status == 201
    delete = k8s("DELETE", f"{CONFIGMAPS}/grace", query={"gracePeriodSeconds": "0.5"})
    assert delete.status == 400
    assert delete.message == 'strconv.ParseInt: parsing "0.5": invalid syntax'
    assert k8s("GET", f"{CONFIGMAPS}/grace").status == 200  # nothing was deleted
    for good in ("300", "+7", "-1", "0"):
        assert k8s("GET", CONFIGMAPS, query={"limit": good}).status == 200, good
    # a whole-number timeout is a watch that ends when the server says
    ended = k8s("GET", CONFIGMAPS, query={"watch": "true", "timeoutSeconds": "1"})
    assert ended.status == 200
    # GetOptions has no int64: a get ignores them (unknown parameters are ignored)
    assert k8s("GET", f"{CONFIGMAPS}/grace", query={"timeoutSeconds": "x"}).status == 200


def test_bool_parameters_are_true_unless_false_or_zero(k8s: Client) -> None:
    """``Convert_Slice_string_To_bool``: only "false" (any case) and "0" are false; anything
    else, even an empty or nonsense value, is true and never an error."""
    for value in ("true", "yes", "", "False", "0", "TRUE"):
        answer = k8s(
            "GET",
            CONFIGMAPS,
            query={"allowWatchBookmarks": value, "watch": "false"},
        )
        assert answer.status == 200, value
    delete = k8s("DELETE", f"{CONFIGMAPS}/absent", query={"orphanDependents": "nonsense"})
    assert delete.status == 404  # parsed as true; the object is simply not there


def test_unknown_parameters_are_ignored(k8s: Client) -> None:
    """The parameter codec decodes only the options' own fields; any other key is ignored."""
    assert (
        k8s("GET", CONFIGMAPS, query={"timeout": "300.0", "pretty": "x", "foo": "1"}).status == 200
    )
    created = k8s("POST", CONFIGMAPS, {"metadata": {"name": "unknown-q"}}, query={"bogus": "1"})
    assert created.status == 201


def test_field_validation_enumeration(k8s: Client) -> None:
    """``ValidateCreateOptions`` / ``ValidateUpdateOptions`` / ``ValidatePatchOptions``:
    fieldValidation must be "", Ignore, Warn or Strict (case matters): 422 Invalid naming the
    options kind, with the sorted supported values."""
    supported = 'supported values: "", "Ignore", "Strict", "Warn"'
    create = k8s(
        "POST", CONFIGMAPS, {"metadata": {"name": "fv"}}, query={"fieldValidation": "strict"}
    )
    assert create.status == 422
    assert create.reason == "Invalid"
    assert create.message == (
        'CreateOptions.meta.k8s.io "" is invalid: fieldValidation: Unsupported value: "strict": '
        + supported
    )
    assert k8s("POST", CONFIGMAPS, {"metadata": {"name": "fv"}}).status == 201
    put = k8s(
        "PUT", f"{CONFIGMAPS}/fv", {"metadata": {"name": "fv"}}, query={"fieldValidation": "X"}
    )
    assert put.status == 422
    assert put.message.startswith('UpdateOptions.meta.k8s.io "" is invalid: fieldValidation: ')
    patch = k8s(
        "PATCH", f"{CONFIGMAPS}/fv", {}, content_type=MERGE, query={"fieldValidation": "Loud"}
    )
    assert patch.status == 422
    assert patch.message == (
        'PatchOptions.meta.k8s.io "" is invalid: fieldValidation: Unsupported value: "Loud": '
        + supported
    )
    for ok in ("Ignore", "Warn", "Strict"):
        answer = k8s(
            "PATCH", f"{CONFIGMAPS}/fv", {}, content_type=MERGE, query={"fieldValidation": ok}
        )
        assert answer.status == 200, ok


def test_propagation_policy_and_orphan_dependents(k8s: Client) -> None:
    """``ValidateDeleteOptions``: propagationPolicy is Foreground, Background or Orphan (422
    otherwise), and may not be combined with orphanDependents; a DELETE's body, when it has one,
    is its DeleteOptions (the query is then not read)."""
    assert k8s("POST", CONFIGMAPS, {"metadata": {"name": "pp"}}).status == 201
    bad = k8s("DELETE", f"{CONFIGMAPS}/pp", query={"propagationPolicy": "background"})
    assert bad.status == 422
    assert bad.message == (
        'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: '
        '"background": supported values: "Foreground", "Background", "Orphan", "nil"'
    )
    both = k8s(
        "DELETE",
        f"{CONFIGMAPS}/pp",
        {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "orphanDependents": True,
            "propagationPolicy": "Orphan",
        },
    )
    assert both.status == 422
    assert both.message == (
        'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Invalid value: "Orphan": '
        "orphanDependents and deletionPropagation cannot be both set"
    )
    ignored_query = k8s(
        "DELETE",
        f"{CONFIGMAPS}/pp",
        {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"},
        query={"propagationPolicy": "nonsense"},
    )
    assert ignored_query.status == 200


def test_dry_run_values_and_dry_run_all(k8s: Client) -> None:
    """``ValidateDryRun``: the only dryRun value is "All" (422 otherwise); with dryRun=All the
    server validates and answers as for a real write, and stores nothing."""
    bad = k8s("POST", CONFIGMAPS, {"metadata": {"name": "dry"}}, query={"dryRun": "true"})
    assert bad.status == 422
    assert bad.message == (
        'CreateOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: []string{"true"}: '
        'supported values: "All"'
    )
    dry = k8s("POST", CONFIGMAPS, {"metadata": {"name": "dry"}}, query={"dryRun": "All"})
    assert dry.status == 201
    assert dry.body["metadata"]["name"] == "dry"
    assert k8s("GET", f"{CONFIGMAPS}/dry").status == 404
    invalid = k8s("POST", CONFIGMAPS, {"metadata": {"name": "Not_A_Name"}}, query={"dryRun": "All"})
    assert invalid.status == 422  # still validated
    assert k8s("POST", CONFIGMAPS, {"metadata": {"name": "dry"}, "data": {"a": "1"}}).status == 201
    patched = k8s(
        "PATCH",
        f"{CONFIGMAPS}/dry",
        {"data": {"a": "2"}},
        content_type=MERGE,
        query={"dryRun": "All"},
    )
    assert patched.status == 200
    assert patched.body["data"] == {"a": "2"}
    assert k8s("GET", f"{CONFIGMAPS}/dry").body["data"] == {"a": "1"}
    deleted = k8s("DELETE", f"{CONFIGMAPS}/dry", query={"dryRun": "All"})
    assert deleted.status == 200
    assert k8s("GET", f"{CONFIGMAPS}/dry").status == 200


def test_resource_version_match_rules(k8s: Client) -> None:
    """``ValidateListOptions``: resourceVersionMatch needs a resourceVersion, is Exact or
    NotOlderThan, "Exact" not with resourceVersion "0"; sendInitialEvents is not for a list;
    a watch takes resourceVersionMatch only with sendInitialEvents (422, ListOptions)."""
    prefix = 'ListOptions.meta.k8s.io "" is invalid: '
    no_version = k8s("GET", CONFIGMAPS, query={"resourceVersionMatch": "NotOlderThan"})
    assert no_version.status == 422
    assert no_version.message == (
        prefix + "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless "
        "resourceVersion is provided"
    )
    unsupported = k8s(
        "GET", CONFIGMAPS, query={"resourceVersionMatch": "Newest", "resourceVersion": "1"}
    )
    assert unsupported.message == (
        prefix + 'resourceVersionMatch: Unsupported value: "Newest": supported values: '
        '"Exact", "NotOlderThan", ""'
    )
    exact_zero = k8s(
        "GET", CONFIGMAPS, query={"resourceVersionMatch": "Exact", "resourceVersion": "0"}
    )
    assert exact_zero.message == (
        prefix + 'resourceVersionMatch: Forbidden: resourceVersionMatch "exact" is forbidden for '
        'resourceVersion "0"'
    )
    two = k8s("GET", CONFIGMAPS, query={"resourceVersionMatch": "Newest"})
    assert two.message.startswith(prefix + "[resourceVersionMatch: Forbidden: ")  # aggregated
    initial = k8s("GET", CONFIGMAPS, query={"sendInitialEvents": "true"})
    assert (
        initial.message
        == prefix + "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list"
    )
    watch = k8s("GET", CONFIGMAPS, query={"watch": "true", "resourceVersionMatch": "NotOlderThan"})
    assert watch.status == 422
    assert watch.message == (
        prefix + "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch "
        "unless sendInitialEvents is provided"
    )
    fine = k8s(
        "GET", CONFIGMAPS, query={"resourceVersionMatch": "NotOlderThan", "resourceVersion": "0"}
    )
    assert fine.status == 200


# -- structural schema --------------------------------------------------------------------------


def test_unknown_fields_are_pruned_with_one_warning_each(k8s: Client) -> None:
    """apiextensions-apiserver prunes every field its structural schema does not declare, and
    with fieldValidation unset (Warn) answers success with one ``Warning: 299 - "unknown field
    \\"<path>\\""`` header per field: paths dotted, array items as ``[i]``, metadata included;
    additionalProperties keys and x-kubernetes-preserve-unknown-fields subtrees are kept."""
    body = widget(
        "pruned",
        {
            "size": 1,
            "bogus": 1,
            "ports": [{"name": "a", "extra": True}],
            "labels": {"any-key": "v"},
            "free": {"whatever": {"deep": 1}},
        },
    )
    body["metadata"]["surprise"] = "x"
    body["topLevel"] = {"a": 1}
    created = k8s("POST", WIDGETS, body)
    assert created.status == 201, created.body
    assert created.warnings == [
        '299 - "unknown field \\"metadata.surprise\\""',
        '299 - "unknown field \\"spec.bogus\\""',
        '299 - "unknown field \\"spec.ports[0].extra\\""',
        '299 - "unknown field \\"topLevel\\""',
    ]
    stored = k8s("GET", f"{WIDGETS}/pruned").body
    assert "bogus" not in stored["spec"]
    assert "topLevel" not in stored
    assert "surprise" not in stored["metadata"]
    assert stored["spec"]["ports"] == [{"name": "a", "protocol": "TCP"}]
    assert stored["spec"]["labels"] == {"any-key": "v"}
    assert stored["spec"]["free"] == {"whatever": {"deep": 1}}
    assert stored["apiVersion"] == f"{GROUP}/v1"
    assert stored["kind"] == "Widget"
    ignored = k8s(
        "POST", WIDGETS, widget("ignored", {"bogus": 1}), query={"fieldValidation": "Ignore"}
    )
    assert ignored.status == 201
    assert ignored.warnings == []
    assert "bogus" not in ignored.body["spec"]


def test_defaults_apply_when_the_parent_is_present(k8s: Client) -> None:
    """``structuraldefaulting.Default``: an absent property with a default is set when its parent
    object exists, recursively (a defaulted object gets its own defaults), for array items too;
    an absent parent without a default stays absent. Applied on create, replace and patch."""
    created = k8s("POST", WIDGETS, widget("defaults", {"ports": [{"name": "p"}]}))
    assert created.status == 201
    spec = created.body["spec"]
    assert spec["size"] == 3
    assert spec["mode"] == "fast"
    assert spec["nested"] == {"level": "deep"}
    assert spec["ports"] == [{"name": "p", "protocol": "TCP"}]
    assert "optional" not in spec
    replaced = k8s("PUT", f"{WIDGETS}/defaults", widget("defaults", {"size": 9, "optional": {}}))
    assert replaced.status == 200
    assert replaced.body["spec"] == {
        "size": 9,
        "mode": "fast",
        "nested": {"level": "deep"},
        "optional": {"x": "y"},
    }
    patched = k8s("PATCH", f"{WIDGETS}/defaults", {"spec": {"mode": None}}, content_type=MERGE)
    assert patched.status == 200
    assert patched.body["spec"]["mode"] == "fast"  # removed, then defaulted again
    ops = [{"op": "remove", "path": "/spec/nested"}]
    json_patched = k8s("PATCH", f"{WIDGETS}/defaults", ops, content_type=JSON_PATCH)
    assert json_patched.status == 200
    assert json_patched.body["spec"]["nested"] == {"level": "deep"}


def test_strict_field_validation_refuses_unknown_fields(k8s: Client) -> None:
    """fieldValidation=Strict: create and replace answer 400 BadRequest from
    ``transformDecodeError`` (``<Kind> in version "<v>" cannot be handled as a <Kind>: strict
    decoding error: unknown field "spec.stat"``); a patch whose result has unknown fields
    answers 422 Invalid from patch.go (``"" is invalid: patch: Invalid value: ...``)."""
    strict = {"fieldValidation": "Strict"}
    body = job("strict", {"application": {"file": "local:///app.py"}, "stat": "x"})
    create = k8s("POST", JOBS, body, query=strict)
    assert create.status == 400
    assert create.reason == "BadRequest"
    assert create.message == (
        'FinishableSparkJob in version "v1alpha1" cannot be handled as a FinishableSparkJob: '
        'strict decoding error: unknown field "spec.stat"'
    )
    assert k8s("GET", f"{JOBS}/strict").status == 404
    two = k8s("POST", WIDGETS, widget("strict", {"a": 1, "b": 2}), query=strict)
    assert two.message == (
        'Widget in version "v1" cannot be handled as a Widget: strict decoding error: '
        'unknown field "spec.a", unknown field "spec.b"'
    )
    assert k8s("POST", WIDGETS, widget("strict")).status == 201
    put = k8s("PUT", f"{WIDGETS}/strict", widget("strict", {"zzz": 1}), query=strict)
    assert put.status == 400
    assert put.message.endswith('strict decoding error: unknown field "spec.zzz"')
    patch = k8s(
        "PATCH", f"{WIDGETS}/strict", {"spec": {"zzz": 1}}, content_type=MERGE, query=strict
    )
    assert patch.status == 422
    assert patch.reason == "Invalid"
    assert patch.message.startswith(' "" is invalid: patch: Invalid value: "{')
    assert patch.message.endswith(': strict decoding error: unknown field "spec.zzz"')
    assert "zzz" not in k8s("GET", f"{WIDGETS}/strict").body["spec"]


# -- conflicts ----------------------------------------------------------------------------------


def test_stale_resource_version_conflicts(k8s: Client) -> None:
    """Optimistic concurrency (``errors.NewConflict``): a PUT, a merge patch carrying
    metadata.resourceVersion, or a JSON patch replacing /metadata/resourceVersion with a stale
    value answers 409 Conflict ``Operation cannot be fulfilled on <resource>.<group> "<name>":
    the object has been modified; ...``; a current one succeeds."""
    created = k8s("POST", WIDGETS, widget("occ", {"size": 1}))
    stale = created.body["metadata"]["resourceVersion"]
    fresh = k8s("PATCH", f"{WIDGETS}/occ", {"spec": {"size": 2}}, content_type=MERGE)
    current = fresh.body["metadata"]["resourceVersion"]
    expected = (
        f'Operation cannot be fulfilled on widgets.{GROUP} "occ": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    put_body = widget("occ", {"size": 5})
    put_body["metadata"]["resourceVersion"] = stale
    put = k8s("PUT", f"{WIDGETS}/occ", put_body)
    assert (put.status, put.reason, put.message) == (409, "Conflict", expected)
    merge = k8s(
        "PATCH",
        f"{WIDGETS}/occ",
        {"metadata": {"resourceVersion": stale}, "spec": {"size": 6}},
        content_type=MERGE,
    )
    assert (merge.status, merge.reason, merge.message) == (409, "Conflict", expected)
    ops = [
        {"op": "replace", "path": "/metadata/resourceVersion", "value": stale},
        {"op": "replace", "path": "/spec/size", "value": 7},
    ]
    json_patch = k8s("PATCH", f"{WIDGETS}/occ", ops, content_type=JSON_PATCH)
    assert (json_patch.status, json_patch.reason, json_patch.message) == (409, "Conflict", expected)
    assert k8s("GET", f"{WIDGETS}/occ").body["spec"]["size"] == 2
    ops[0]["value"] = current
    assert k8s("PATCH", f"{WIDGETS}/occ", ops, content_type=JSON_PATCH).status == 200
    core = k8s("POST", CONFIGMAPS, {"metadata": {"name": "occ"}})
    body = {"metadata": {"name": "occ", "resourceVersion": "1"}}
    assert core.body["metadata"]["resourceVersion"] != "1"
    assert k8s("PUT", f"{CONFIGMAPS}/occ", body).message.startswith(
        'Operation cannot be fulfilled on configmaps "occ": '
    )


def test_json_patch_failed_test_op_is_422(k8s: Client) -> None:
    """patch.go answers an evanphx/json-patch failure (a ``test`` op that does not hold, as kopf
    uses on /metadata/resourceVersion) with ``NewGenericServerResponse(422)``: reason Invalid and
    the generic message, which kopf reads as "retry on the next cycle"."""
    created = k8s("POST", WIDGETS, widget("jp", {"size": 1}))
    version = created.body["metadata"]["resourceVersion"]
    k8s("PATCH", f"{WIDGETS}/jp", {"spec": {"size": 2}}, content_type=MERGE)
    ops = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": version},
        {"op": "replace", "path": "/spec/size", "value": 3},
    ]
    answer = k8s("PATCH", f"{WIDGETS}/jp", ops, content_type=JSON_PATCH)
    assert answer.status == 422
    assert answer.reason == "Invalid"
    assert answer.message == "the server rejected our request due to an error in our request"
    assert k8s("GET", f"{WIDGETS}/jp").body["spec"]["size"] == 2


# -- the record of refusals ---------------------------------------------------------------------


def test_refusals_are_recorded_per_client(k8s: Client) -> None:
    """Not a server behaviour: the emulator's record of the requests a real server would refuse
    (400, 403, 422), so that a test can prove a real client made none."""
    k8s("GET", CONFIGMAPS, query={"watch": "true", "timeoutSeconds": "300.0"}, agent="kopf/1.45")
    refusals = k8s("GET", REFUSALS_PATH).body
    mine = [r for r in refusals if r["client"] == "kopf"]
    assert mine[-1] == {
        "client": "kopf",
        "method": "GET",
        "path": f"{CONFIGMAPS}?watch=true&timeoutSeconds=300.0",
        "status": 400,
        "message": 'strconv.ParseInt: parsing "300.0": invalid syntax',
    }
    assert all(r["status"] in (400, 403, 422) for r in refusals)
