"""``build-control-plane.sh``: a release already in the cache is not built again (nor is Go
needed for it), and a component it does not build is refused by name. The build itself runs in
``make test-all`` (its own setup step) and under the full tier's control-plane tests."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.quick

SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "build-control-plane.sh"
MODULE = Path(__file__).resolve().parents[1] / "controlplane"


def release(go_mod: Path, module: str) -> str:
    for line in go_mod.read_text().splitlines():
        fields = line.split()
        if fields[:1] == [module] and fields[1].startswith("v"):
            return fields[1]
    raise AssertionError(f"{go_mod} requires no {module}")


def run(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The script with a PATH of the few tools it uses, so without Go whatever the machine has."""
    tools = cache / "path"
    tools.mkdir(exist_ok=True)
    for tool in ("awk", "sed", "cut", "head", "date", "mkdir", "mv", "dirname"):
        found = shutil.which(tool)
        assert found, f"{tool} is missing"
        if not (tools / tool).exists():
            (tools / tool).symlink_to(found)
    no_go = {**os.environ, "FINISHABLE_CACHE": str(cache), "PATH": str(tools)}
    return subprocess.run(
        [shutil.which("sh") or "/bin/sh", str(SCRIPT), *args],
        env=no_go,
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_cached_release_is_found_without_building(tmp_path: Path) -> None:
    kubernetes = tmp_path / f"kubernetes-{release(MODULE / 'go.mod', 'k8s.io/kubernetes')}"
    etcd = tmp_path / f"etcd-{release(MODULE / 'etcd' / 'go.mod', 'go.etcd.io/etcd/server/v3')}"
    built = [
        kubernetes / "kube-apiserver",
        kubernetes / "kube-controller-manager",
        kubernetes / "kube-scheduler",
        etcd / "etcd",
    ]
    for binary in built:
        binary.parent.mkdir(exist_ok=True)
        binary.write_text("#!/bin/sh\necho stand-in\n")
        binary.chmod(0o755)
    done = run(tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(path) for path in built]
    assert "building" not in done.stderr


def test_a_missing_binary_needs_go_and_says_so(tmp_path: Path) -> None:
    done = run(tmp_path, "kube-apiserver")
    assert done.returncode == 1 and "go is needed to build kube-apiserver" in done.stderr


def test_an_unknown_component_is_refused_by_name(tmp_path: Path) -> None:
    done = run(tmp_path, "kube-dns")
    assert done.returncode == 2
    assert "unknown component 'kube-dns'" in done.stderr
    assert all(name in done.stderr for name in ("etcd", "kube-proxy", "coredns", "pause"))
