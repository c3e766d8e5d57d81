"""The `finishable` command: validate, crd, describe, version; no tracebacks for user mistakes."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from finishable.api.crd import CRD_FILE, SNAPSHOT_CRD_FILE
from finishable.cli import build_parser, main

pytestmark = pytest.mark.quick

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(ROOT.glob("examples/*/*.yaml"))

BAD = """\
apiVersion: finishable.dev/v1alpha1
kind: FinishableSparkJob
metadata: {name: broken}
spec:
  mode: Batch
  application: {file: job.py}
  executor: {instances: "many"}
  state: Paused
  checkpointing: {interval: 10 seconds}
  shuffle: {replicas: -2}
"""


def test_examples_are_valid(capsys: pytest.CaptureFixture[str]) -> None:
    # job, bounded, postgres, kafka, cluster and platform (streaming); local, cluster, promote and
    # top (batch)
    assert len(EXAMPLES) == 10
    assert main(["validate", *map(str, EXAMPLES)]) == 0
    out = capsys.readouterr().out
    assert "Streaming job 'clickstream'" in out
    assert "Streaming job 'clickstream-postgres'" in out
    assert "Streaming job 'clickstream-kafka'" in out
    assert "Streaming job 'pageviews'" in out
    assert "Batch job 'paid-totals'" in out


def test_bad_manifest_names_every_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = tmp_path / "bad.yaml"
    manifest.write_text(BAD)
    assert main(["validate", str(manifest)]) == 1
    lines = capsys.readouterr().err.splitlines()
    by_field = {line.split(": ")[1]: line for line in lines}
    assert set(by_field) == {
        "spec.executor.instances",
        "spec.state",
        "spec.checkpointing.interval",
        "spec.shuffle.replicas",
    }
    assert all(line.startswith(f"{manifest}: spec.") for line in lines)
    assert "'many'" in by_field["spec.executor.instances"]
    assert "'Paused'" in by_field["spec.state"] and "'Suspended'" in by_field["spec.state"]
    assert "'10 seconds'" in by_field["spec.checkpointing.interval"]
    assert "-2" in by_field["spec.shuffle.replicas"]


def test_good_and_bad_files_together(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD)
    assert main(["validate", str(EXAMPLES[0]), str(bad)]) == 1
    captured = capsys.readouterr()
    assert ": ok" in captured.out
    assert str(bad) in captured.err


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("spec: [unclosed", "invalid YAML: line 1"),
        ("", "holds no YAML document"),
        ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", "not a FinishableSparkJob"),
        ("- just\n- a list\n", "expected a FinishableSparkJob object"),
    ],
)
def test_unusable_files_get_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, expected: str
) -> None:
    manifest = tmp_path / "job.yaml"
    manifest.write_text(content)
    assert main(["validate", str(manifest)]) == 1
    err = capsys.readouterr().err
    assert expected in err
    assert "Traceback" not in err


def test_missing_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "/nonexistent/job.yaml"]) == 1
    assert (
        "/nonexistent/job.yaml: cannot read: No such file or directory" in capsys.readouterr().err
    )


def test_multi_document_file_names_the_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "jobs.yaml"
    manifest.write_text(EXAMPLES[0].read_text() + "\n---\n" + BAD)
    assert main(["validate", str(manifest)]) == 1
    captured = capsys.readouterr()
    assert f"{manifest}#1: ok" in captured.out
    assert f"{manifest}#2: spec.state" in captured.err


def test_crd_command_prints_the_committed_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["crd"]) == 0
    assert capsys.readouterr().out == (ROOT / CRD_FILE).read_text()
    assert main(["crd", "--snapshot"]) == 0
    assert capsys.readouterr().out == (ROOT / SNAPSHOT_CRD_FILE).read_text()


def test_describe_fills_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    streaming = ROOT / "examples/streaming/job.yaml"
    assert main(["describe", str(streaming)]) == 0
    out = capsys.readouterr().out
    document = yaml.safe_load(out)
    assert document["spec"]["recovery"]["snapshotMinPause"] == "3m"
    assert "shuffle" not in document["spec"]
    assert "stop with savepoint and drain" in out


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "validate" in capsys.readouterr().out


def test_console_script_runs_without_traceback(tmp_path: Path) -> None:
    manifest = tmp_path / "bad.yaml"
    manifest.write_text(BAD)
    script = Path(sys.executable).with_name("finishable")
    done = subprocess.run(
        [str(script), "validate", str(manifest)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 1
    assert "spec.state" in done.stderr
    assert "Traceback" not in done.stderr
    version = subprocess.run([str(script), "version"], capture_output=True, text=True, check=True)
    assert version.stdout.startswith("finishable 0.1.0")


def test_lifecycle_prints_the_tables(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lifecycle"]) == 0
    out = capsys.readouterr().out
    assert "### SOURCE tasks" in out and "### NON_SOURCE tasks" in out
    assert main(["lifecycle", "--kind", "SOURCE", "--mode", "STOP_WITH_SAVEPOINT"]) == 0
    only = capsys.readouterr().out
    assert "NON_SOURCE" not in only and "EMIT_END_OF_DATA_NOT_FINISHED" in only


def test_run_refuses_a_snapshot_ref_which_only_the_operator_resolves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "job.yaml"
    manifest.write_text(
        "apiVersion: finishable.dev/v1alpha1\nkind: FinishableSparkJob\n"
        "metadata: {name: clicks}\n"
        "spec: {application: {file: job.py}, restoreFrom: {snapshotRef: clicks-savepoint-7}}\n"
    )
    assert main(["validate", str(manifest)]) == 0  # a valid manifest for a cluster
    capsys.readouterr()
    assert main(["run", str(manifest), "--state-dir", str(tmp_path / "state")]) == 1
    err = capsys.readouterr().err
    assert "spec.restoreFrom.snapshotRef" in err and "restoreFrom.savepoint" in err
    assert "Traceback" not in err


def test_the_operator_s_ttl_options_are_durations_and_say_why_not(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parsed = build_parser().parse_args(["operator", "--ttl-after-failed", "7d"])
    assert parsed.ttl_after_failed.total_seconds() == 7 * 86400
    assert parsed.ttl_after_finished is None, "unset: Finished jobs are kept"
    with pytest.raises(SystemExit) as exited:
        main(["operator", "--ttl-after-finished", "1 day"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--ttl-after-finished: '1 day' is not a duration" in err
