"""``make test`` and ``make test-all`` (testcluster/tools/run-tier.sh): the steps in order, the
tier handed to pytest, and where the minutes went, also when a step fails. Stand-ins for make and
pytest record what they were asked."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.quick

SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "run-tier.sh"


def stand_in(path: Path, log: Path, fail_on: str = "") -> None:
    """A command that appends its name and arguments to ``log`` (and fails on ``fail_on``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fail = f'case "$*" in *"{fail_on}"*) exit 3 ;; esac\n' if fail_on else ""
    path.write_text(f'#!/bin/sh\necho "$(basename "$0") $*" >> "{log}"\n{fail}')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


Ran = tuple[subprocess.CompletedProcess[str], list[str]]


def run_tier(tmp_path: Path, tier: str, *, uid: int = 1000, **env: str) -> Ran:
    """The script's run in ``tmp_path`` with stand-ins, as user ``uid``, and the calls they
    recorded."""
    log = tmp_path / "calls"
    stand_in(tmp_path / "bin" / "make", log, env.pop("MAKE_FAILS_ON", ""))
    stand_in(tmp_path / ".venv" / "bin" / "pytest", log)
    (tmp_path / "bin" / "id").write_text(f"#!/bin/sh\necho {uid}\n")
    (tmp_path / "bin" / "id").chmod(0o755)
    done = subprocess.run(
        ["sh", str(SCRIPT), tier],
        cwd=tmp_path,
        # the defaults, whatever the run of this test was given (E2E_RUNTIME=process make test)
        env={
            **os.environ,
            "MAKE": str(tmp_path / "bin" / "make"),
            "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
            "WORKERS": "3",
            "E2E_RUNTIME": "container",
            "E2E_CONTROL_PLANE": "",
            "E2E_REAL_NODES": "",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done, log.read_text().splitlines() if log.exists() else []


def test_make_test_sets_up_checks_and_runs_the_quick_tier_then_reports(tmp_path: Path) -> None:
    done, calls = run_tier(tmp_path, "quick")
    assert done.returncode == 0, done.stderr
    assert calls == [
        "make -s venv",
        "make -s tools",
        "make -s jars",
        "make -s image",
        "make -s control-plane",
        "make -s lint",
        "make -s typecheck",
        "pytest tests testcluster --tier quick -n 3 --dist loadfile",
        "pytest e2e --tier quick",
    ]
    report = done.stdout[done.stdout.index("make test: where the minutes went") :]
    steps = (
        "setup: Spark's S3 connector",
        "setup: the image",
        "setup: the control plane",
        "mypy --strict",
        "e2e on the local cluster (quick, container, real)",
    )
    assert all(step in report for step in steps), report
    assert report.rstrip().splitlines()[-1].split()[0] == "total"


def test_make_test_all_runs_both_tiers_and_process_pods_need_no_image(tmp_path: Path) -> None:
    done, calls = run_tier(tmp_path, "all", E2E_RUNTIME="process")
    assert done.returncode == 0, done.stderr
    assert "make -s image" not in calls
    assert "make -s control-plane" in calls, "the full tier's control plane, built apart"
    assert "make -s real-node" in calls, "and its real node's parts"
    assert calls[-2:] == [
        "pytest tests testcluster --tier all -n 3 --dist loadfile",
        "pytest e2e --tier all",
    ]
    assert "make test-all: where the minutes went" in done.stdout


def test_a_failed_step_stops_the_run_with_its_status_and_the_report(tmp_path: Path) -> None:
    done, calls = run_tier(tmp_path, "quick", MAKE_FAILS_ON="lint")
    assert done.returncode == 3
    assert calls[-1] == "make -s lint" and not any(c.startswith("pytest") for c in calls)
    assert "ruff" in done.stdout and "FAILED (exit 3)" in done.stdout


def test_make_test_on_the_emulator_builds_no_control_plane(tmp_path: Path) -> None:
    for env in ({"E2E_CONTROL_PLANE": "emulator"}, {"E2E_RUNTIME": "process"}):
        done, calls = run_tier(tmp_path, "quick", **env)
        assert done.returncode == 0, done.stderr
        assert "make -s control-plane" not in calls, env
        assert "make -s real-node" not in calls, env
        assert "(quick, " in done.stdout and ", emulator)" in done.stdout, env
        (tmp_path / "calls").unlink()


def test_make_test_all_runs_the_e2e_flows_on_real_nodes_where_root_can(tmp_path: Path) -> None:
    done, _ = run_tier(tmp_path, "all", uid=0)
    assert "e2e on the local cluster (all, container, real, 4 real nodes)" in done.stdout
    done, _ = run_tier(tmp_path, "all", uid=1000)
    assert "e2e on the local cluster (all, container, real)" in done.stdout, "no root, no node"


def test_make_test_on_real_nodes_builds_their_parts_and_says_so(tmp_path: Path) -> None:
    done, calls = run_tier(tmp_path, "quick", E2E_REAL_NODES="4")
    assert done.returncode == 0, done.stderr
    assert calls.index("make -s control-plane") < calls.index("make -s real-node")
    assert "e2e on the local cluster (quick, container, real, 4 real nodes)" in done.stdout


def test_an_unknown_tier_is_refused_naming_the_two() -> None:
    done = subprocess.run(["sh", str(SCRIPT), "fast"], capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "quick|all" in done.stderr
