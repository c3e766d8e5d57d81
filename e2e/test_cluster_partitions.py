"""Cluster partitions on the cluster (FLIP-67), through the partition service the chart installs.

A Batch job promotes its totals into the cluster's object store; the service lists them with
their size and rows; a second job reads them (its executor pods pull the parts as splits) and
publishes the best customers, compared with a ground truth from the producer's input; a DELETE
is accepted, completes, frees the storage, and the partition is then unknown. Requests without
the namespace's token are refused.
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from typing import Any

import pyarrow.fs as pafs
import pytest

from finishable.connectors.sinks import TransactionalFiles
from testcluster.client import ROOT, E2ECluster, batch_example, wait_for
from testcluster.localcluster.cluster import ClusterAccess

sys.path.insert(0, str(ROOT / "examples" / "batch"))
from orders import ground_truth

pytestmark = [pytest.mark.e2e, pytest.mark.full]

FILES, ROWS, TOP = 8, 2000, 5
RUN = 600.0


def call(url: str, method: str = "GET", token: str | None = None) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_a_promoted_result_is_listed_read_by_another_job_and_released(
    cluster: E2ECluster, local_cluster: ClusterAccess | None
) -> None:
    if local_cluster is None:
        pytest.skip("needs the local cluster's object store (the chart's partition service)")
    namespace = cluster.namespace
    token = local_cluster.partition_tokens[namespace]
    service = local_cluster.partition_service_url()
    base = f"{service}/v1/namespaces/{namespace}/partitions"

    producer = batch_example(cluster.data_dir, cluster.image, "promoting", FILES, ROWS)
    producer["spec"]["application"]["args"].append("--promote")
    assert cluster.apply(producer).status == 201
    cluster.wait_phase("promoting", "Finished", RUN)

    assert call(base)[0] == 401
    other = next(ns for ns in local_cluster.partition_tokens if ns != namespace)
    assert call(base, token=local_cluster.partition_tokens[other])[0] == 403
    status, listed = call(base, token=token)
    assert status == 200, listed
    [partition] = listed["partitions"]
    truth = ground_truth(FILES, ROWS)
    assert (partition["name"], partition["rows"], partition["state"]) == (
        "promoting/totals",
        len(truth),
        "Available",
    )
    assert partition["job-id"] == cluster.job("promoting")["metadata"]["uid"]  # type: ignore[index]
    assert partition["bytes"] > 0 and partition["partitions"] >= 1
    # kubectl get fsj promoting -o jsonpath='{.status.clusterPartitions}'
    [in_status] = cluster.status("promoting")["clusterPartitions"]
    assert (in_status["id"], in_status["rows"]) == (partition["id"], partition["rows"])

    consumer = batch_example(cluster.data_dir, cluster.image, "top-customers", FILES)
    application = consumer["spec"]["application"]
    application["file"] = "local:///opt/finishable/examples/batch/top.py"
    application["args"] = [
        f"--partition={partition['id']}",
        "--output=/data/top-customers/top",
        f"--top={TOP}",
    ]
    assert cluster.apply(consumer).status == 201
    cluster.wait_phase("top-customers", "Finished", RUN)
    output = cluster.data_dir / "top-customers" / "top"
    published = TransactionalFiles(str(output), name="top").read_committed().to_pylist()
    ranked = sorted(truth.items(), key=lambda item: (-item[1][1], item[0]))[:TOP]
    assert published == [{"customer": c, "orders": o, "amount_cents": a} for c, (o, a) in ranked]

    status, accepted = call(f"{base}/{partition['id']}", "DELETE", token)
    assert status == 202, accepted
    request = f"{base}/delete-requests/{accepted['request-id']}"
    wait_for(
        lambda: call(request, token=token)[1]["status"] == "COMPLETED",
        "the delete request to complete",
        60,
    )
    filesystem, root = pafs.FileSystem.from_uri(local_cluster.partition_storage_from_host())
    left = filesystem.get_file_info(
        pafs.FileSelector(f"{root}/{partition['id']}", recursive=True, allow_not_found=True)
    )
    assert left == [], "the storage is freed"
    assert call(f"{base}/{partition['id']}", token=token)[0] == 404
    assert call(base, token=token)[1]["partitions"] == []
