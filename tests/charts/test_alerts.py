"""The alerting rules the chart ships (files/alerts.yaml, a PrometheusRule when
metrics.prometheusRule.enabled): checked and unit-tested by Debian's promtool, the same file the
template embeds, each alert tested both ways, and every series they select one the operator
exports."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from testcluster.chart.dashboard import metric_names
from testcluster.tools import installed
from tests.charts.test_dashboard import exported_series

pytestmark = pytest.mark.quick

HERE = Path(__file__).resolve().parent
CHART = HERE.parents[1] / "charts" / "finishable-spark-operator"
RULES = CHART / "files" / "alerts.yaml"
RULE_TESTS = HERE / "alerts_test.yaml"


def alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [installed("promtool"), *args], cwd=HERE, capture_output=True, text=True, check=False
    )


def test_promtool_checks_the_rules() -> None:
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in result.stdout


def test_promtool_runs_the_rules_unit_tests() -> None:
    result = promtool("test", "rules", RULE_TESTS.name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_is_tested_firing_and_silent() -> None:
    cases = [
        case
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in test["alert_rule_test"]
    ]
    for alert in alerts():
        name = alert["alert"]
        mine = [case for case in cases if case["alertname"] == name]
        assert any(case["exp_alerts"] for case in mine), f"{name} is never tested firing"
        assert any(not case["exp_alerts"] for case in mine), f"{name} is never tested silent"
        for case in mine:
            for expected in case["exp_alerts"]:
                assert {"namespace", "job_name"} <= set(expected["exp_labels"]), name


def test_alerts_select_only_series_the_operator_exports() -> None:
    exported = exported_series()
    for alert in alerts():
        names = metric_names(alert["expr"])
        assert names, f"{alert['alert']} selects no metric"
        assert names <= exported, f"{alert['alert']}: the operator exports no {names - exported}"


def test_every_alert_has_a_severity_a_summary_and_a_description() -> None:
    for alert in alerts():
        assert alert["labels"]["severity"] in {"critical", "warning"}, alert["alert"]
        assert {"summary", "description"} <= set(alert["annotations"]), alert["alert"]
        assert "job" not in alert["labels"], "job is the scrape job's label"
