"""What the real node's parts are told (``nodeconfig.py``) and the runc wrapper's one change
(``runc_floor.py``), without starting anything."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from testcluster.controlplane import nodeconfig, runc_floor
from testcluster.controlplane.nodeconfig import NodeAddresses

pytestmark = pytest.mark.quick


def test_two_nodes_share_no_address_link_or_namespace() -> None:
    one, two = NodeAddresses(1), NodeAddresses(2)
    fields = ("name", "host", "node", "pod_subnet", "host_link", "node_link", "bridge")
    for name in fields:
        assert getattr(one, name) != getattr(two, name), name
    assert all(len(getattr(NodeAddresses(250), link)) <= 15  # IFNAMSIZ - 1
               for link in ("host_link", "node_link", "bridge"))  # fmt: skip
    assert one.node.rsplit(".", 1)[0] == one.host.rsplit(".", 1)[0]


@pytest.mark.parametrize("index", [0, 251])
def test_an_index_outside_the_address_plan_is_refused(index: int) -> None:
    with pytest.raises(ValueError, match=r"1\.\.250"):
        NodeAddresses(index)


def test_containerd_runs_runc_through_the_wrapper_with_the_nodes_cni(tmp_path: Path) -> None:
    text = nodeconfig.containerd_config(
        tmp_path / "root", Path("/run/n1"), tmp_path / "runc", tmp_path / "cni"
    )
    assert f'BinaryName = "{tmp_path / "runc"}"' in text
    assert 'address = "/run/n1/containerd.sock"' in text
    assert f'conf_dir = "{tmp_path / "cni"}"' in text
    assert f'sandbox_image = "{nodeconfig.PAUSE_IMAGE}"' in text
    assert "SystemdCgroup = false" in text


def test_the_kubelet_keeps_cgroup_v1_and_its_pods_under_their_own_root(tmp_path: Path) -> None:
    config = nodeconfig.kubelet_config(
        containerd_socket=Path("/run/n1/containerd.sock"),
        client_ca=tmp_path / "ca.crt",
        serving=(tmp_path / "k.crt", tmp_path / "k.key"),
        cgroup_root="/finishable-node-1",
        pod_logs=tmp_path / "logs",
        dns="10.250.1.2",
    )
    assert config["failCgroupV1"] is False and config["cgroupDriver"] == "cgroupfs"
    assert config["cgroupRoot"] == "/finishable-node-1"
    assert config["containerRuntimeEndpoint"] == "unix:///run/n1/containerd.sock"
    assert config["authentication"]["anonymous"] == {"enabled": False}
    assert config["authorization"] == {"mode": "Webhook"}
    assert config["clusterDNS"] == ["10.250.1.2"]


def test_the_bridge_masquerades_and_hairpins_within_the_nodes_subnet(tmp_path: Path) -> None:
    bridge = nodeconfig.cni_config(NodeAddresses(7), tmp_path)["plugins"][0]
    assert bridge["bridge"] == "fsn7br" and bridge["isGateway"] and bridge["ipMasq"]
    assert bridge["hairpinMode"] is True
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.244.7.0/24"}]]
    assert bridge["ipam"]["dataDir"] == str(tmp_path)


def test_coredns_answers_the_cluster_domain_on_the_nodes_address(tmp_path: Path) -> None:
    text = nodeconfig.corefile("10.250.3.2", tmp_path / "dns.json")
    assert text.startswith("cluster.local:53 {") and "bind 10.250.3.2" in text
    assert f"kubeconfig {tmp_path / 'dns.json'}" in text


def test_the_pause_image_archive_holds_the_binary_as_its_entrypoint() -> None:
    archive = nodeconfig.image_archive(b"\x7fELF-pause", "example.dev/pause:1", "/pause")
    with tarfile.open(fileobj=io.BytesIO(archive)) as outer:
        manifest = json.loads(outer.extractfile("manifest.json").read())  # type: ignore[union-attr]
        config = json.loads(outer.extractfile("config.json").read())  # type: ignore[union-attr]
        layer = outer.extractfile("layer.tar").read()  # type: ignore[union-attr]
    assert manifest == [
        {"Config": "config.json", "RepoTags": ["example.dev/pause:1"], "Layers": ["layer.tar"]}
    ]
    assert config["config"] == {"Entrypoint": ["/pause"], "User": "65535:65535"}
    with tarfile.open(fileobj=io.BytesIO(layer)) as inner:
        member = inner.getmember("pause")
        assert member.mode == 0o755
        assert inner.extractfile(member).read() == b"\x7fELF-pause"  # type: ignore[union-attr]


def test_runc_floor_raises_a_score_below_the_machines_and_leaves_others() -> None:
    sandbox = {"process": {"oomScoreAdj": -998, "args": ["/pause"]}}
    assert runc_floor.floored(sandbox, 0) is True
    assert sandbox["process"] == {"oomScoreAdj": 0, "args": ["/pause"]}
    besteffort = {"process": {"oomScoreAdj": 1000}}
    assert runc_floor.floored(besteffort, 0) is False
    assert besteffort["process"]["oomScoreAdj"] == 1000
    assert runc_floor.floored({"process": {}}, 0) is False


def test_runc_floor_finds_the_bundle_of_create_and_run() -> None:
    args = ["--root", "/r", "--log", "/l.json", "create", "--bundle", "/b/one", "id"]
    assert runc_floor.bundle_of(args) == Path("/b/one")
    assert runc_floor.bundle_of(["run", "-b", "/b/two", "id"]) == Path("/b/two")
    assert runc_floor.bundle_of(["delete", "--force", "id"]) is None


def test_the_machine_forwards_a_nodes_traffic_both_ways_and_no_other_nodes() -> None:
    rules = nodeconfig.forward_rules(NodeAddresses(3))
    assert sorted(rule[1] for rule in rules) == ["-i", "-o"]
    assert all(
        rule[0] == "FORWARD" and rule[2] == "fsn3h" and rule[-1] == "ACCEPT" for rule in rules
    )
